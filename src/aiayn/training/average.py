"""Checkpoint averaging (§6.1: "averaging the last 5 checkpoints, written at 10-minute intervals").

Works on any directories holding `config.json` + `model.safetensors` (training
checkpoints and model directories alike). Means are taken in float64 and cast back.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from aiayn.config import training_only_names
from aiayn.data.tokenizer import MANIFEST, TOKENIZER_DIR, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.io import atomic_dir, check_replaceable, read_tensors
from aiayn.models import CONFIG_FILE, MODEL_TYPE_KEY, WEIGHTS_FILE, PretrainedModel, is_model_dir, load_model, read_config
from aiayn.model_dir import DEFAULT_TASK, TASK_FILE, read_task_info, write_task_info
from aiayn.training.checkpoint import MODEL_DIR, found_beside, run_dir_of
from aiayn.training.config import CONFIG_NAME, load_config

log = logging.getLogger(__name__)

class DifferentModels(ValueError):
    """Checkpoints whose configs (or vocabularies) describe different models: their weights have no meaningful mean."""


def average_state(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the tensors stored in each `path/model.safetensors`."""
    if not paths:
        raise ValueError("average needs at least one checkpoint")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = Path(path) / WEIGHTS_FILE
        if not weights.is_file():
            raise FileNotFoundError(f"{weights}: not found; is {path} a checkpoint or model directory?")
        tensors = read_tensors(weights)
        if total and set(tensors) != set(total):
            raise ValueError(f"{weights}: parameter names differ from {Path(paths[0]) / WEIGHTS_FILE}")
        for name, t in tensors.items():
            if name in total and t.shape != total[name].shape:
                raise DifferentModels(f"{weights}: {name} has shape {tuple(t.shape)}, but "
                                      f"{tuple(total[name].shape)} in {Path(paths[0]) / WEIGHTS_FILE}")
            dtypes.setdefault(name, t.dtype)
            total[name] = total[name] + t.double() if name in total else t.double()
    return {name: (t / len(paths)).to(dtypes[name]) for name, t in total.items()}


def average_checkpoints(paths: Sequence[str | Path]) -> PretrainedModel:
    """A model of the checkpoints' type whose weights are the mean of theirs.

    Their configs must agree but for fields declared `training_only` (dropout, say): checkpoints that
    differ only there (fine-tuning runs with another dropout) average like one run's, the "model soup"
    of Wortsman et al. (2022). The model takes the first one's config."""
    configs = [read_config(p) for p in paths]  # (model_type, config) each; errors name the file
    for path, config in zip(paths[1:], configs[1:]):
        _check_same_model(configs[0], config, Path(paths[0]) / CONFIG_FILE, Path(path) / CONFIG_FILE)
    model = load_model(paths[0])
    params = model.state_dict()  # tied names share storage, so writing one writes both
    with torch.no_grad():
        for name, value in average_state(paths).items():
            params[name].copy_(value)
    return model


def _check_same_model(first: tuple[str, Any], other: tuple[str, Any], first_file: Path, other_file: Path) -> None:
    """Raise if `other` describes a different model from `first` (each a (model_type, config) pair);
    log differences in training-only fields."""
    a, b = _fields(*first), _fields(*other)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    shown = ", ".join(f"{k} {b.get(k)!r} (first: {a.get(k)!r})" for k in differ)
    if set(differ) - training_only_names(first[1]):
        raise DifferentModels(f"{other_file}: cannot average checkpoints of different model configs: "
                              f"{shown}; the first is {first_file}")
    if differ:
        log.info("%s: %s; the average keeps %s's", other_file, shown, first_file)


def _fields(model_type: str, config: Any) -> dict:
    """The model type and every config field, defaults filled in."""
    return {MODEL_TYPE_KEY: model_type, **dataclasses.asdict(config)}


def tokenizer_dir(ckpt: str | Path) -> Path | None:
    """Where a checkpoint's vocabulary is: the directory itself, else RUN_DIR/tokenizer or
    RUN_DIR/model (for ckpt = RUN_DIR/checkpoints/ckpt_N); None where there is none."""
    return found_beside(ckpt, MANIFEST, [TOKENIZER_DIR, MODEL_DIR])


def check_same_vocabulary(paths: Sequence[str | Path], expected: TokenizerPair, source: str | Path) -> None:
    """Raise DifferentModels if a checkpoint's own vocabulary (see `tokenizer_dir`) is not `expected`
    (read from `source`): the same config with another vocabulary gives each embedding row another
    meaning, so the mean is noise. Checkpoints with no vocabulary near them are taken as `expected`'s."""
    def fingerprint(pair: TokenizerPair) -> tuple[str, str]:
        return pair.src.fingerprint(), pair.tgt.fingerprint()

    source, want = Path(source), fingerprint(expected)
    for path in paths:
        own = tokenizer_dir(path)
        if own is None or own.resolve() == source.resolve():
            continue
        if fingerprint(load_tokenizers(own)) != want:
            raise DifferentModels(f"{own / MANIFEST}: another vocabulary than {source / MANIFEST}; "
                                  f"the weights of models with different vocabularies have no meaningful mean")


def checkpoint_task_info(ckpt: str | Path) -> dict:
    """The task.json that goes with a checkpoint or model directory: its own (training checkpoints carry
    one since 2026-11-26), else its run's model/ (ckpt = RUN_DIR/checkpoints/ckpt_N). Neither: {} for a
    run of the default task, which reads so; a run of another task is an error naming it, instead of a
    model that would answer as the wrong task."""
    found = found_beside(ckpt, TASK_FILE, [MODEL_DIR])
    if found is not None:
        return read_task_info(found)
    run_dir = run_dir_of(ckpt)
    config = run_dir / CONFIG_NAME
    task = load_config(config).task if config.is_file() else DEFAULT_TASK  # a damaged config.toml: an error naming it
    if task != DEFAULT_TASK:
        raise FileNotFoundError(f"no {TASK_FILE} in {ckpt} or {run_dir / MODEL_DIR} for this {task} run ({config}); "
                                f"pass a model directory of the same task (--task-from)")
    return {}


def write_average(paths: Sequence[Path], output: str | Path, tokenizer: str | Path | None = None,
                  task_info: dict | None = None) -> tuple[Path, Path]:
    """The mean of the checkpoints' weights as a self-contained model directory `output`, with the
    vocabulary of `tokenizer` (default: the first checkpoint's, see `tokenizer_dir`), which each
    checkpoint's own must match, and `task_info` as task.json (default: the first checkpoint's or its
    run's, `checkpoint_task_info`). All is checked before anything is written. Returns (the model
    directory, the directory the vocabulary came from)."""
    info = checkpoint_task_info(paths[0]) if task_info is None else task_info
    tok_dir = Path(tokenizer) if tokenizer else tokenizer_dir(paths[0])
    if tok_dir is None:
        raise FileNotFoundError(f"no tokenizer.json near {paths[0]}; pass --tokenizer DIR")
    vocabulary = load_tokenizers(tok_dir)
    check_same_vocabulary(paths, vocabulary, tok_dir)
    check_replaceable(output, is_model_dir, "a model directory", paths)
    model = average_checkpoints(paths)
    with atomic_dir(output) as tmp:  # whole or not at all, and nothing left from what was there
        model.save_pretrained(tmp)
        save_tokenizers(vocabulary, tmp)
        if info:
            write_task_info(tmp, info)
    return Path(output), tok_dir
