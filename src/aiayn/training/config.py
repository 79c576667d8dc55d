"""Training configuration: a TOML file mapped onto frozen dataclasses.

    [model]   preset = "small" plus any `TransformerConfig` field as an override
    [optim]   `OptimConfig` fields (label smoothing, Adam, warmup, clipping)
    [decode]  `DecodeConfig` fields (used for the test-time settings of the recipe)
    [data]    `DataConfig`: corpus, languages, vocabulary, batch size in tokens
    [train]   `RunConfig`: budget, schedule, precision, checkpoints, validation

Paper defaults live in `aiayn.config`; the fields here that are not the paper's have
their only default in this module. CLI flags map onto these fields (`--set
train.max_updates=100`) and add no defaults of their own. Unknown keys are errors that
name the file and the key. `save_config` writes the resolved config as TOML, which
`load_config` reads back unchanged (used by `--resume`).
"""

from __future__ import annotations

from types import MappingProxyType

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from aiayn.config import ConfigError, DecodeConfig, OptimConfig, TransformerConfig, check_types
from aiayn.data.tokenizer import DEFAULT_VOCAB_SIZE
from aiayn.io import atomic_write

PRECISIONS = ("fp32", "bf16", "fp16")
VOCAB_TYPES = ("bpe", "unigram", "symbols", "chars")
DATA_FORMATS = ("parallel", "jsonl", "babi", "text")
CONFIG_NAME = "config.toml"


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


@dataclass(frozen=True)
class ModelSpec:
    """The model's type (a name in `aiayn.models.MODEL_TYPES`), a preset (the encoder-decoder's
    `TransformerConfig.preset`s) and field overrides of the type's config. Vocabulary sizes are
    not set here: they come from the tokenizers, so `build` is called once those exist."""

    preset: str = "base"
    overrides: tuple[tuple[str, Any], ...] = ()
    type: str = "encoder-decoder"

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(sorted(dict(self.overrides).items())))
        for key in ("src_vocab_size", "tgt_vocab_size", "vocab_size"):
            _check(key not in dict(self.overrides),
                   f"model.{key} is set from the tokenizer; set data.vocab_size instead")
        self.build(64, 64 if dict(self.overrides).get("share_embeddings", True) is not False else 65)

    def build(self, src_vocab_size: int, tgt_vocab_size: int):
        """The model config (`TransformerConfig`, `RNNConfig`, ...) for these vocabulary sizes."""
        from aiayn.models import model_class

        config_class = model_class(self.type).config_class
        fields = {f.name for f in dataclasses.fields(config_class)}
        unknown = sorted(set(dict(self.overrides)) - fields)
        _check(not unknown, f"unknown model key(s): {', '.join(unknown)}; known: type, preset, {', '.join(sorted(fields))}")
        check_types(config_class, dict(self.overrides), prefix="model.")
        if config_class is TransformerConfig:
            return TransformerConfig.preset(self.preset, src_vocab_size=src_vocab_size,
                                            tgt_vocab_size=tgt_vocab_size, **dict(self.overrides))
        if "vocab_size" in fields:  # one vocabulary: a language model
            return config_class(vocab_size=src_vocab_size, **dict(self.overrides))
        return config_class(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **dict(self.overrides))

    def to_dict(self) -> dict:
        return {"type": self.type, "preset": self.preset, **dict(self.overrides)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelSpec":
        data = dict(data)
        preset, kind = data.pop("preset", cls.preset), data.pop("type", cls.type)
        _check(isinstance(preset, str) and isinstance(kind, str),
               f"model.preset and model.type must be strings, got {preset!r}, {kind!r}")
        return cls(preset=preset, overrides=tuple(data.items()), type=kind)


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes batches.

    corpus: "synthetic" (the built-in task `task`, see aiayn.data.synthetic), a registered
    corpus name ("multi30k", ...; looked up in `data_dir`, else downloaded), a directory of
    `{split}.{lang}[.gz]` files, or a TSV file (see aiayn.data.corpus.resolve_source).
    """

    corpus: str = "synthetic"
    data_dir: str = ""  # local copy of a registered corpus; "" = $AIAYN_DATA_DIR or download
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    train_split: str = "train"
    valid_split: str = "val"
    test_split: str = ""  # "" = none
    tokenizer: str = ""  # a directory holding tokenizer.json (e.g. from `aiayn prepare --out`); "" = train one per run
    vocab_type: str = "bpe"  # "bpe" | "unigram" (sentencepiece) | "symbols" (whitespace symbols)
    vocab_size: int = DEFAULT_VOCAB_SIZE  # sentencepiece only; "symbols" takes the symbols of the training data
    joint_vocab: bool = True  # one vocabulary for both languages (§3.4)
    max_tokens: int = 4096  # per micro-batch: padded source + padded target elements (src.numel() + tgt_in.numel())
    batching: str = "bucket"  # "bucket": length-sorted token buckets (aiayn.data); "random": mixed lengths
    max_length: int = 256  # training pairs with a longer side (in tokens) are dropped
    valid_max_sentences: int = 0  # validation BLEU on the first N sentences (the loss on all); 0 = all
    # summarization and question answering (aiayn.tasks.summarization, aiayn.tasks.qa)
    format: str = "parallel"  # "parallel" (as above) | "jsonl" (records) | "babi" (bAbI story files) | "text" (lm)
    source_field: str = "text"  # jsonl summarization: the input field
    target_field: str = "summary"  # jsonl summarization: the output field (the training target)
    reference_fields: tuple[str, ...] = ()  # more references for scoring (the score is the max over them)
    max_source_length: int = 0  # > 0: longer sources are truncated to this many tokens (counted), not dropped
    valid_fraction: float = 0.0  # > 0: valid_split is carved from the training files (seeded, by story)
    patch_size: int = 2  # image-classify: the side of the square patches (ViT)
    # synthetic task only
    task: str = "reverse"
    n_train: int = 20000
    n_valid: int = 200
    n_symbols: int = 10
    min_len: int = 3
    max_len: int = 10

    def __post_init__(self) -> None:
        _check(self.vocab_type in VOCAB_TYPES,
               f"data.vocab_type must be one of {', '.join(VOCAB_TYPES)}, got {self.vocab_type!r}")
        _check(self.batching in ("bucket", "random"),
               f"data.batching must be 'bucket' or 'random', got {self.batching!r}")
        object.__setattr__(self, "reference_fields", tuple(self.reference_fields))
        _check(self.format in DATA_FORMATS, f"data.format must be one of {', '.join(DATA_FORMATS)}, got {self.format!r}")
        _check(self.max_source_length >= 0, "data.max_source_length must be >= 0")
        _check(0.0 <= self.valid_fraction < 1.0, f"data.valid_fraction must be in [0, 1), got {self.valid_fraction}")
        for name in ("vocab_size", "max_tokens", "max_length", "n_train", "n_valid", "n_symbols"):
            _check(getattr(self, name) > 0, f"data.{name} must be positive, got {getattr(self, name)}")
        _check(self.valid_max_sentences >= 0, "data.valid_max_sentences must be >= 0")
        _check(1 <= self.min_len <= self.max_len, f"data: need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        _check(self.src_lang != self.tgt_lang or self.corpus == "synthetic",
               f"data.src_lang and data.tgt_lang are both {self.src_lang!r}")


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
    precision: str = "fp32"  # "fp32" | "bf16" (autocast, CPU or CUDA) | "fp16" (CUDA, loss scaling)
    seed: int = 1
    device: str = "auto"  # "auto" (cuda if available) | "cpu" | "cuda" | "cuda:N"
    num_threads: int = 0  # torch intra-op threads; 0 = torch's default
    save_every_updates: int = 0  # 0 = off
    save_every_minutes: float = 0.0  # 0 = off
    keep_last: int = 5  # checkpoints kept besides the best
    validate_every: int = 0  # updates; 0 = at the end of every epoch
    bleu: bool = True  # greedy sacreBLEU at validation
    patience: int = 0  # stop after this many validations without a better loss; 0 = off
    average_last: int = 1  # final model = mean of the last N checkpoints (§6.1); 1 = last weights
    best_metric: str = "nll"  # what makes the "best" checkpoint: "nll" or a task metric (aiayn.metrics.higher_is_better says which way wins)
    final: str = "last"  # RUN_DIR/model: "last" (the mean of the last average_last) or "best" (the best checkpoint)
    init_from: str = ""  # a model directory whose weights start a fresh run (same names and shapes; e.g. MLM -> classifier)
    max_bad_updates: int = 10  # stop after this many non-finite updates in a row
    log_every: int = 50  # updates between train rows in metrics.jsonl
    progress: bool = True  # the `aiayn train` command draws a progress bar

    def __post_init__(self) -> None:
        _check(bool(self.run_dir.strip()), "train.run_dir must not be empty (it would train into the current directory)")
        _check(self.update_freq >= 1, f"train.update_freq must be >= 1, got {self.update_freq}")
        for name in ("max_updates", "max_epochs", "save_every_updates", "validate_every", "patience", "num_threads"):
            _check(getattr(self, name) >= 0, f"train.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_minutes", "save_every_minutes"):
            v = getattr(self, name)
            _check(v >= 0 and math.isfinite(v), f"train.{name} must be a finite number >= 0, got {v}")
        _check(0.0 <= self.cooldown < 1.0, f"train.cooldown must be in [0, 1), got {self.cooldown}")
        _check(self.max_updates or self.max_epochs or self.max_minutes,
               "set at least one of train.max_updates, train.max_epochs, train.max_minutes")
        from aiayn.training.schedule import SCHEDULES

        _check(self.schedule in SCHEDULES,
               f"train.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        _check(self.precision in PRECISIONS,
               f"train.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        _check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               f"train.device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        for name in ("keep_last", "average_last", "max_bad_updates", "log_every"):
            _check(getattr(self, name) >= 1, f"train.{name} must be >= 1, got {getattr(self, name)}")
        _check(self.final in ("last", "best"), f"train.final must be 'last' or 'best', got {self.final!r}")
        _check(self.average_last <= self.keep_last,
               f"train.average_last ({self.average_last}) cannot exceed train.keep_last ({self.keep_last})")


SECTIONS: Mapping[str, type] = MappingProxyType({
    "model": ModelSpec, "optim": OptimConfig, "decode": DecodeConfig, "data": DataConfig, "train": RunConfig,
})


DEFAULT_TASK = "translation"  # `aiayn.tasks.TASKS` holds the others


@dataclass(frozen=True)
class TrainConfig:
    """The whole training config. `train` has no default: a run needs a budget.
    `task` is a top-level key of the TOML file, before the sections."""

    train: RunConfig
    model: ModelSpec = field(default_factory=ModelSpec)
    optim: OptimConfig = field(default_factory=OptimConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        from aiayn.tasks import TASKS

        _check(self.task in TASKS, f"task must be one of {', '.join(TASKS)}, got {self.task!r}")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"task": self.task, "model": self.model.to_dict()}
        for name in ("optim", "decode", "data", "train"):
            out[name] = dataclasses.asdict(getattr(self, name))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<config>") -> "TrainConfig":
        data = dict(data)
        task = data.pop("task", DEFAULT_TASK)
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; known: task, {', '.join(SECTIONS)}")
        sections = {}
        for name, section_cls in SECTIONS.items():
            body = data.get(name, {})
            if not isinstance(body, Mapping):
                raise ConfigError(f"{source}: [{name}] must be a table, got {body!r}")
            sections[name] = _build_section(name, section_cls, body, source)
        try:
            return cls(**sections, task=task)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def replace(self, **sections: Any) -> "TrainConfig":
        return dataclasses.replace(self, **sections)


def _build_section(name: str, section_cls: type, body: Mapping[str, Any], source: str):
    try:
        if section_cls is ModelSpec:
            return ModelSpec.from_dict(body)
        known = {f.name for f in dataclasses.fields(section_cls)}
        unknown = sorted(set(body) - known)
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; "
                              f"known in [{name}]: {', '.join(sorted(known))}")
        check_types(section_cls, body, prefix=f"{name}.")
        return section_cls(**body)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except TypeError as e:  # e.g. a string where a number belongs, caught by a comparison
        raise ConfigError(f"{source}: bad value in [{name}]: {e}") from None


# -- files and overrides ------------------------------------------------------------------
def load_config(path: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a TOML config (or start from defaults when `path` is None) and apply
    `section.key=value` overrides; values are parsed as TOML, else taken as strings."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        path, source = Path(path), str(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: invalid TOML: {e}") from None
    for item in overrides:
        _apply_override(data, item)
    if overrides:
        source += " with --set " + " ".join(overrides)
    return TrainConfig.from_dict(data, source)


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
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def save_config(cfg: TrainConfig, run_dir: str | Path) -> Path:
    path = Path(run_dir) / CONFIG_NAME
    with atomic_write(path) as tmp:
        tmp.write_text(to_toml(cfg), encoding="utf-8")
    return path
