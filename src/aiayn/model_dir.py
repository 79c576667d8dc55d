"""A model directory's task.json: which task made the model, and what its inference needs (decoding
defaults, how inputs are cut). Below `tasks` and `export`, which both read it.

    MODEL_DIR/config.json       the model (`aiayn.models`)
    MODEL_DIR/task.json         {"task": name, "decode": {...}, "keep": ..., "max_input_tokens": ..., ...}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from aiayn.config import DecodeConfig
from aiayn.io import atomic_write, read_json_object
from aiayn.models.base import CONFIG_FILE

TASK_FILE = "task.json"  # in a model directory: which task made it, and what its inference needs
DEFAULT_TASK = "translation"  # a recipe without `task`, and a model directory without task.json


def existing(model_dir: str | Path) -> Path:
    """`model_dir` as a Path; a FileNotFoundError naming it where there is no such directory."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: model directory not found")
    return model_dir


def read_task_info(model_dir: str | Path, expect: Optional[str] = None) -> dict:
    """The model directory's task.json ({} for a directory written before it existed: a translation
    model). A path that is not a model directory (no config.json), or a "task" that is not a name, is
    an error saying so; with `expect`, a directory of another task is an error naming both."""
    model_dir = existing(model_dir)
    if not (model_dir / CONFIG_FILE).is_file():
        raise ValueError(f"{model_dir}: not a model directory (no {CONFIG_FILE})")
    path = model_dir / TASK_FILE
    info = read_json_object(path, missing_ok=True)
    found = info.get("task", DEFAULT_TASK)
    if not isinstance(found, str) or not found.strip():
        raise ValueError(f"{path}: task must be a task name (a string such as {DEFAULT_TASK!r}), got {found!r}")
    if expect is not None and found != expect:
        raise ValueError(f"{model_dir}: a {found} model ({TASK_FILE}), not a {expect} model")
    return info


def write_task_info(model_dir: str | Path, info: dict) -> None:
    """task.json, atomically; `info` holds at least {"task": name}."""
    with atomic_write(Path(model_dir) / TASK_FILE) as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")


def task_of(model_dir: str | Path) -> str:
    """The task name recorded in a model directory's task.json (`DEFAULT_TASK` without one)."""
    return read_task_info(model_dir).get("task", DEFAULT_TASK)


def task_field(info: dict, model_dir: str | Path, name: str, kind: type, what: str):
    """task.json's `name` (`info`: as `read_task_info` read it), which must be a `kind`; its absence or
    another type is a ValueError naming the file and saying what it should hold (`what`)."""
    value = info.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise ValueError(f"{Path(model_dir) / TASK_FILE}: no {name} ({what})")
    return value


def decode_settings(info: dict, model_dir: str | Path) -> DecodeConfig:
    """task.json's (`info`) decoding settings as a `DecodeConfig` (its defaults where it has none); a bad
    setting is a one-line error naming the file."""
    try:
        return DecodeConfig(**info.get("decode", {}))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{Path(model_dir) / TASK_FILE}: bad decode settings ({e})") from None


def translator_options(info: dict, model_dir: str | Path) -> dict:
    """`Translator` options from `model_dir`'s task.json (`info`): its decoding defaults and how its
    sources are cut ({} for a directory without task.json: the Translator's defaults)."""
    options = {"keep": info.get("keep", "start"), "max_input_tokens": info.get("max_input_tokens")}
    if "decode" in info:
        options["decode"] = decode_settings(info, model_dir)
    return options
