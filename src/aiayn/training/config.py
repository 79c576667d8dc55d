"""Training configuration: a TOML file mapped onto frozen dataclasses.

    [model]   preset = "small" plus any `TransformerConfig` field as an override
    [optim]   `OptimConfig` fields (label smoothing, Adam, warmup, clipping)
    [decode]  `DecodeConfig` fields (used for the test-time settings of the recipe)
    [data]    the task's own settings class (`Task.data_config`): corpus, vocabulary, batch size
    [train]   `RunConfig`: budget, schedule, precision, checkpoints, validation

Paper defaults live in `aiayn.config`; the fields here that are not the paper's have
their only default in this module. CLI flags map onto these fields (`--set
train.max_updates=100`) and add no defaults of their own. Unknown keys are errors that
name the file and the key. `save_config` writes the resolved config as TOML, which
`load_config` reads back unchanged (used by `--resume`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

from aiayn.config import ConfigError, DecodeConfig, OptimConfig, check, check_types, did_you_mean
from aiayn.io import atomic_write, read_utf8
from aiayn.metrics import LOSS_METRICS
from aiayn.models import DEFAULT_MODEL_TYPE, model_class
from aiayn.tasks import DEFAULT_TASK, TASKS, task_class
from aiayn.training.schedule import SCHEDULES

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "fp16", "auto")
CONFIG_NAME = "config.toml"


def check_seed(seed: int) -> None:
    """train.seed's range, numpy's (also `aiayn prepare --seed`'s: the vocabulary it trains must match a run's)."""
    check(0 <= seed < 2**32, f"train.seed must be from 0 to 2**32 - 1 (numpy's range), got {seed}")


VOCABULARY_KEYS = ("src_vocab_size", "tgt_vocab_size", "vocab_size")  # set from the tokenizers, never in [model]


@dataclass(frozen=True)
class ModelSpec:
    """The model's type (a name in `aiayn.models.MODEL_TYPES`), a preset (the encoder-decoder's
    `TransformerConfig.preset`s) and field overrides of the type's config. Vocabulary sizes are
    not set here: they come from the tokenizers, so `build` is called once those exist."""

    preset: str = "base"
    overrides: tuple[tuple[str, Any], ...] = ()
    type: str = DEFAULT_MODEL_TYPE

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(sorted(dict(self.overrides).items())))
        for key in VOCABULARY_KEYS:
            check(key not in dict(self.overrides),
                   f"model.{key} is set from the tokenizer; set data.vocab_size instead")
        check(self.preset == ModelSpec.preset or self.has_presets,
               f"model.preset = {self.preset!r}: model type {self.type!r} has no presets (they are the "
               "encoder-decoder's sizes); set its fields instead")
        self.build(64, 64 if dict(self.overrides).get("share_embeddings", True) is not False else 65)

    @property
    def has_presets(self) -> bool:
        """Whether the type's config has named sizes (`TransformerConfig.preset`)."""
        return callable(getattr(model_class(self.type).config_class, "preset", None))

    def build(self, src_vocab_size: int, tgt_vocab_size: int, **fixed: Any):
        """The model config (`TransformerConfig`, `RNNConfig`, ...) for these vocabulary sizes, with the
        fields a task sets itself (`fixed`: a ViT's input = "patches", a classifier's n_classes)."""
        config_class = model_class(self.type).config_class
        fields = {f.name for f in dataclasses.fields(config_class)}
        settable = sorted(fields - set(VOCABULARY_KEYS) | {"type", "preset"})
        unknown = sorted(set(dict(self.overrides)) - fields)
        check(not unknown, f"unknown model key(s): {', '.join(unknown)}{did_you_mean(unknown, settable)}; "
                            f"known: {', '.join(settable)}")
        check_types(config_class, dict(self.overrides), prefix="model.")
        try:
            return config_class.for_vocab(self.preset, src_vocab_size, tgt_vocab_size, **{**dict(self.overrides), **fixed})
        except ConfigError as e:
            raise ConfigError(f"[model] {e}") from None

    def to_dict(self) -> dict:
        return {"type": self.type, **({"preset": self.preset} if self.has_presets else {}), **dict(self.overrides)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelSpec":
        data = dict(data)
        preset, kind = data.pop("preset", cls.preset), data.pop("type", cls.type)
        check(isinstance(preset, str) and isinstance(kind, str),
               f"model.preset and model.type must be strings, got {preset!r}, {kind!r}")
        return cls(preset=preset, overrides=tuple(data.items()), type=kind)


@dataclass(frozen=True)
class RunConfig:
    """How long, how fast, how safely. At least one of max_updates / max_epochs / max_minutes."""

    run_dir: str = "runs/default"
    update_freq: int = 1  # micro-batches per optimizer update (gradient accumulation)
    max_updates: int = 0  # 0 = no limit
    max_epochs: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # wall-clock training budget across resumes; 0 = no limit
    schedule: str = "noam"  # a name in aiayn.training.schedule.SCHEDULES
    cooldown: float = 0.0  # final fraction of the budget over which the lr falls linearly to 0; 0 = off (the paper)
    precision: str = "fp32"  # "fp32" | "bf16" (autocast, CPU or CUDA) | "fp16" (CUDA, loss scaling) | "auto" (bf16 where native)
    seed: int = 1
    device: str = "auto"  # "auto" (cuda if available) | "cpu" | "cuda" | "cuda:N"
    num_threads: int = 0  # torch intra-op threads; 0 = torch's default
    save_every_updates: int = 0  # 0 = off
    save_every_minutes: float = 10.0  # 0 = off; on by default, so that a crash loses at most this much
    keep_last: int = 5  # checkpoints kept besides the best
    validate_every: int = 0  # updates; 0 = at the end of every epoch
    bleu: bool = True  # text-to-text tasks: decode the validation sources greedily and score them (BLEU, ROUGE, ...)
    patience: int = 0  # stop after this many validations without a better loss; 0 = off
    average_last: int = 1  # final model = mean of the last N checkpoints (§6.1); 1 = last weights
    best_metric: str = "nll"  # what makes the "best" checkpoint: "nll" or a task metric (the task's lower_is_better says which way wins)
    final: str = "last"  # RUN_DIR/model: "last" (the mean of the last average_last) or "best" (the best checkpoint)
    init_from: str = ""  # a model directory whose architecture, weights and vocabulary start a fresh run; the recipe gives the head (MLM -> classifier, an imported BERT -> classifier)
    max_bad_updates: int = 10  # stop after this many non-finite updates in a row
    log_every: int = 50  # updates between train rows in metrics.jsonl
    progress: bool = True  # the `aiayn train` command draws a progress bar

    def __post_init__(self) -> None:
        check(bool(self.run_dir.strip()), "train.run_dir must not be empty (it would train into the current directory)")
        check(self.update_freq >= 1, f"train.update_freq must be >= 1, got {self.update_freq}")
        for name in ("max_updates", "max_epochs", "save_every_updates", "validate_every", "patience", "num_threads"):
            check(getattr(self, name) >= 0, f"train.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_minutes", "save_every_minutes"):
            v = getattr(self, name)
            check(v >= 0 and math.isfinite(v), f"train.{name} must be a finite number >= 0, got {v}")
        check(0.0 <= self.cooldown < 1.0, f"train.cooldown must be in [0, 1), got {self.cooldown}")
        check_seed(self.seed)
        check(self.max_updates or self.max_epochs or self.max_minutes,
               "set at least one of train.max_updates, train.max_epochs, train.max_minutes")

        check(self.schedule in SCHEDULES,
               f"train.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        check(self.precision in PRECISIONS,
               f"train.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               f"train.device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        for name in ("keep_last", "average_last", "max_bad_updates", "log_every"):
            check(getattr(self, name) >= 1, f"train.{name} must be >= 1, got {getattr(self, name)}")
        check(self.final in ("last", "best"), f"train.final must be 'last' or 'best', got {self.final!r}")
        check(self.average_last <= self.keep_last,
               f"train.average_last ({self.average_last}) cannot exceed train.keep_last ({self.keep_last})")
        check(self.average_last == 1 or self.final == "last",
               "train.final = 'best' takes the best checkpoint alone: train.average_last does not apply")


SECTIONS: Mapping[str, type] = MappingProxyType({
    "model": ModelSpec, "optim": OptimConfig, "decode": DecodeConfig, "train": RunConfig,
})  # and "data": the task's own `data_config`


@dataclass(frozen=True)
class TrainConfig:
    """The whole training config. `train` has no default: a run needs a budget.
    `task` is a top-level key of the TOML file, before the sections; `data` is an instance of
    that task's `data_config` (its defaults when not given)."""

    train: RunConfig
    model: ModelSpec = field(default_factory=ModelSpec)
    optim: OptimConfig = field(default_factory=OptimConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    data: Any = None
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        settings = task_class(self.task).data_config
        if self.data is None:
            object.__setattr__(self, "data", settings())
        check(isinstance(self.data, settings),
               f"task {self.task!r} reads [data] as {settings.__name__}, got {type(self.data).__name__}")
        if self.train.init_from and getattr(self.data, "tokenizer", None) == "":  # its vocabulary, as its weights
            object.__setattr__(self, "data", dataclasses.replace(self.data, tokenizer=self.train.init_from))
        self._check_best_metric()

    def _check_best_metric(self) -> None:
        """train.best_metric names what validation will report: a typo is refused now, not at the first
        validation, hours in. A task from outside that does not declare its `metrics` is checked then."""
        task, best = task_class(self.task), self.train.best_metric
        metrics = getattr(task, "metrics", None)
        known = [*LOSS_METRICS, *(metrics or ())]
        check(metrics is None or best in known,
               f"train.best_metric = {best!r}: task {self.task!r} validates "
               f"{', '.join(known)}{did_you_mean([best], known, 'train.best_metric = ')}")
        check(self.train.bleu or best in LOSS_METRICS or not getattr(task, "metrics_need_decoding", False),
               f"train.best_metric = {best!r} needs train.bleu = true: without it validation decodes nothing and "
               f"gives only {', '.join(LOSS_METRICS)}")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"task": self.task, "model": self.model.to_dict()}
        for name in ("optim", "decode", "data", "train"):
            out[name] = dataclasses.asdict(getattr(self, name))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<config>") -> "TrainConfig":
        data = dict(data)
        task = data.pop("task", DEFAULT_TASK)
        unknown = sorted(set(data) - set(SECTIONS) - {"data"})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}{did_you_mean(unknown, [*SECTIONS, 'data'])}"
                              f"; known: task, data, {', '.join(SECTIONS)}")
        try:
            settings = task_class(task).data_config if isinstance(task, str) else None
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        check(settings is not None, f"{source}: task must be a string, got {task!r}")
        sections = {}
        for name, section_cls in {**SECTIONS, "data": settings}.items():
            body = data.get(name, {})
            if not isinstance(body, Mapping):
                raise ConfigError(f"{source}: [{name}] must be a table, got {body!r}")
            sections[name] = _build_section(name, section_cls, body, source, task)
        try:
            return cls(**sections, task=task)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def replace(self, **sections: Any) -> "TrainConfig":
        return dataclasses.replace(self, **sections)


def _build_section(name: str, section_cls: type, body: Mapping[str, Any], source: str, task: str):
    try:
        if section_cls is ModelSpec:
            return ModelSpec.from_dict(body)
        body = _renamed(name, section_cls, body, source)
        known = {f.name for f in dataclasses.fields(section_cls)}
        unknown = sorted(set(body) - known)
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}{_owners(unknown, task)}"
                              f"{did_you_mean(unknown, known, f'{name}.')}; known in [{name}]: {', '.join(sorted(known))}")
        check_types(section_cls, body, prefix=f"{name}.")
        return section_cls(**body)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except TypeError as e:  # e.g. a string where a number belongs, caught by a comparison
        raise ConfigError(f"{source}: bad value in [{name}]: {e}") from None


def _renamed(name: str, section_cls: type, body: Mapping[str, Any], source: str) -> dict:
    """`body` with the keys the section renamed (`section_cls.renamed`: old -> new, or None for a key
    that no longer means anything) read under their new names, each said once as a warning, so a
    recipe or a run directory written before the rename still loads (and resumes)."""
    renamed = getattr(section_cls, "renamed", {})
    out = dict(body)
    for old in sorted(set(body) & set(renamed)):
        new = renamed[old]
        if new is not None and new in body:
            raise ConfigError(f"{name}.{old} was renamed {name}.{new}; give only {name}.{new}")
        value = out.pop(old)
        if new is not None:
            out[new] = value
        log.warning("%s: %s.%s %s", source, name, old, f"is now {name}.{new} (read as such)" if new else
                    "no longer applies (ignored)")
    return out


def _owners(keys: Sequence[str], task: str) -> str:
    """", a setting of task lm, not of task qa" for data keys that another built-in task reads."""
    owners = {}
    for other in TASKS:
        fields = {f.name for f in dataclasses.fields(task_class(other).data_config)}
        for key in keys:
            if key in fields and other != task:
                owners.setdefault(key, []).append(other)
    said = [f"data.{k} is a setting of task {' and '.join(t)}" for k, t in owners.items()]
    return f" ({'; '.join(said)}, not of task {task})" if said else ""


# -- files and overrides ------------------------------------------------------------------
def load_config(path: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a TOML config (or start from defaults when `path` is None) and apply
    `section.key=value` overrides; values are parsed as TOML, else taken as strings."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        path, source = Path(path), str(path)
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a config file (a run's is {path / CONFIG_NAME}; "
                              f"--resume {path} continues that run)")
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        try:  # a bad byte: a ValueError naming the file and line; a byte-order mark (Windows editors) is let be
            data = tomllib.loads(read_utf8(path).removeprefix("\ufeff"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: invalid TOML: {e}") from None
    for item in overrides:
        _apply_override(data, item)
    if overrides:
        source += " with --set " + " ".join(overrides)
    return TrainConfig.from_dict(data, source)


def string_override(key: str, value: str | Path) -> str:
    """`--set key=value` for a string taken as given (a path flag's): "3", "true" or "2024-01-01"
    as the value would parse as a number, a bool or a date. A JSON string is a TOML basic string."""
    return f"{key}={json.dumps(str(value))}"


def _apply_override(data: dict, item: str) -> None:
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not (len(parts) == 2 or parts == ["task"]) or not all(parts):
        raise ConfigError(f"--set expects section.key=value (e.g. train.max_updates=100) or task=NAME, got {item!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare string
    if parts == ["task"]:
        data["task"] = value
        return
    section = data.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise ConfigError(f"--set {item!r}: {parts[0]} is not a section")
    section[parts[1]] = value


def to_toml(cfg: TrainConfig) -> str:
    """The config as TOML (sections of scalars and arrays; None values are omitted, which
    reads back as the field default, None)."""
    data = cfg.to_dict()
    lines = [f"task = {_toml_value(data.pop('task'))}", ""]
    for name, body in data.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in body.items() if v is not None]
        lines.append("")
    return "\n".join(lines)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if not (isinstance(v, float) and math.isinf(v)) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):  # a JSON string is a TOML basic string, once DEL is escaped too (TOML §String)
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def save_config(cfg: TrainConfig, run_dir: str | Path) -> Path:
    path = Path(run_dir) / CONFIG_NAME
    with atomic_write(path) as tmp:
        tmp.write_text(to_toml(cfg), encoding="utf-8")
    return path
