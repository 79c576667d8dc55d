"""What every model type shares: a frozen config, a `model_type` name, and a model directory
of `config.json` (the config plus its `model_type`) and `model.safetensors` (no pickle).

A model type plugs in by subclassing `PretrainedModel`, setting `model_type` and
`config_class`, and being listed in `aiayn.models.MODEL_TYPES`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from aiayn.config import ConfigError, known_fields
from aiayn.io import atomic_write

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
MODEL_TYPE_KEY = "model_type"


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """`model` in eval mode inside the block (no dropout), back in the mode it had after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


class ModelConfig:
    """What every frozen model config (a dataclass) shares: config.json round trips with their
    types checked, the width the learning-rate schedule scales with, and size checks."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Any:
        return cls(**known_fields(cls, dict(data), "model config"))  # __post_init__ checks the types

    @property
    def width(self) -> int:
        """The width the learning-rate schedule scales with (§5.3: d_model^-0.5)."""
        return self.d_model

    @property
    def depth(self) -> str:
        """The layer count as people write it: "6+6" for an encoder-decoder, "4" for one stack."""
        return str(self.n_layers)

    @classmethod
    def for_vocab(cls, preset: str, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> Any:
        """The config for vocabularies of these sizes (a recipe's `[model]`; the preset names the
        encoder-decoder's sizes, and `ModelSpec` refuses one for other types). A model of one
        vocabulary takes `src_vocab_size`."""
        names = {f.name for f in dataclasses.fields(cls)}
        sizes = {"vocab_size": src_vocab_size} if "vocab_size" in names else {
            "src_vocab_size": src_vocab_size, "tgt_vocab_size": tgt_vocab_size}
        return cls(**sizes, **overrides)

    def check_positive(self, *names: str) -> None:
        for name in names:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")


class PretrainedModel(nn.Module):
    """Base class: `save_pretrained(dir)` and weight loading. Subclasses set the class attributes."""

    model_type: ClassVar[str]
    config_class: ClassVar[type]

    def __init__(self, config: Any):
        super().__init__()
        self.config = config
        self.mapped = False  # its tensors are views of a memory-mapped file (`assign_weights` on the CPU)

    def num_parameters(self) -> int:
        """Distinct trainable parameters (tied matrices count once)."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json (with `model_type`) and model.safetensors, each atomically."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = {MODEL_TYPE_KEY: self.model_type, **self.config.to_dict()}
        with atomic_write(directory / CONFIG_FILE) as tmp:
            tmp.write_text(json.dumps(config, indent=2) + "\n")
        with atomic_write(directory / WEIGHTS_FILE) as tmp:
            save_file(self._distinct_tensors(), str(tmp))
        return directory

    def _distinct_tensors(self) -> dict[str, torch.Tensor]:
        """The state dict on the CPU, a tied matrix once (under its first name, which safetensors'
        `load_model` accepts for the group). Not `save_model`: on CUDA, cuDNN packs an RNN's weights
        into one buffer, and `save_model` refuses tensors that share a storage without covering it."""
        seen: dict[tuple, str] = {}
        state = {}
        for name, tensor in self.state_dict().items():
            key = (tensor.device, tensor.data_ptr(), tuple(tensor.shape))
            if key not in seen:
                seen[key] = name
                state[name] = tensor.detach().to("cpu").contiguous()
        return state

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> "PretrainedModel":
        """The model in `directory`, which must be of this class's type (see `aiayn.models.load_model`)."""
        from aiayn.models import load_model

        model = load_model(directory, device)
        if not isinstance(model, cls):
            raise ValueError(f"{Path(directory) / CONFIG_FILE}: model_type {model.model_type!r} is not a {cls.__name__}")
        return model

    def load_weights(self, path: str | Path, device: str | torch.device = "cpu") -> None:
        """Load model.safetensors into this model; errors name the file."""
        from safetensors.torch import load_model

        try:
            load_model(self, str(path), device=str(device))
        except Exception as e:  # safetensors raises several types for truncated/corrupt/mismatched files
            raise ValueError(f"{path}: cannot load weights ({_first_lines(e)})") from e
        self.mapped = False  # copied into its tensors: no longer the file's pages

    def assign_weights(self, path: str | Path, device: str | torch.device = "cpu") -> None:
        """Make the tensors of model.safetensors this model's own, for a model built on the meta device
        (`aiayn.models.load_model`): on the CPU they are views of the file, memory-mapped (copy on write),
        so nothing is read twice and pages are read as they are used. A tied matrix is in the file once,
        under one of its names. Errors name the file."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), "pt", device=str(device)) as f:
                state = {name: f.get_tensor(name) for name in f.keys()}
            missing, unexpected = self.load_state_dict(state, strict=False, assign=True)
            self.mapped = torch.device(device).type == "cpu"
        except Exception as e:  # truncated or corrupt files, shape mismatches
            raise ValueError(f"{path}: cannot load weights ({_first_lines(e)})") from e
        tied = _tied_names(self)
        untied = [name for name in missing if not set(tied[name]) & set(state)]
        if untied or unexpected:
            raise ValueError(f"{path}: cannot load weights (missing: {', '.join(untied) or 'none'}; "
                             f"unexpected: {', '.join(unexpected) or 'none'})")


def _tied_names(model: nn.Module) -> dict[str, list[str]]:
    """Each state-dict name -> every name of the same tensor (itself included)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return {name: names for names in groups.values() for name in names}


def _first_lines(e: Exception) -> str:
    """An error's first two lines (torch lists every mismatch), and how many more there were."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    more = f"; and {len(lines) - 2} more" if len(lines) > 2 else ""
    return " ".join(lines[:2]) + more
