"""Checkpoint averaging (§6.1: "averaging the last 5 checkpoints, written at 10-minute intervals").

Works on any directories holding `config.json` + `model.safetensors` (training
checkpoints and model directories alike). Means are taken in float64 and cast back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

from aiayn.models import CONFIG_FILE, WEIGHTS_FILE, PretrainedModel, load_model


def average_state(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the tensors stored in each `path/model.safetensors`."""
    from safetensors.torch import load_file

    if not paths:
        raise ValueError("average needs at least one checkpoint")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = Path(path) / WEIGHTS_FILE
        if not weights.is_file():
            raise FileNotFoundError(f"{weights}: not found; is {path} a checkpoint or model directory?")
        try:
            tensors = load_file(str(weights))
        except Exception as e:  # safetensors raises its own error types for damaged files
            raise ValueError(f"{weights}: cannot load weights ({e})") from e
        if total and set(tensors) != set(total):
            raise ValueError(f"{weights}: parameter names differ from {Path(paths[0]) / WEIGHTS_FILE}")
        for name, t in tensors.items():
            dtypes.setdefault(name, t.dtype)
            total[name] = total[name] + t.double() if name in total else t.double()
    return {name: (t / len(paths)).to(dtypes[name]) for name, t in total.items()}


def average_checkpoints(paths: Sequence[str | Path]) -> PretrainedModel:
    """A model of the checkpoints' type whose weights are the mean of theirs (configs must agree)."""
    configs = [json.loads((Path(p) / CONFIG_FILE).read_text()) for p in paths if (Path(p) / CONFIG_FILE).is_file()]
    if len(configs) != len(paths):
        missing = [str(Path(p) / CONFIG_FILE) for p in paths if not (Path(p) / CONFIG_FILE).is_file()]
        raise FileNotFoundError(f"{missing[0]}: not found")
    if any(c != configs[0] for c in configs):
        raise ValueError("cannot average checkpoints of different model configs")
    model = load_model(paths[0])
    params = model.state_dict()  # tied names share storage, so writing one writes both
    with torch.no_grad():
        for name, value in average_state(paths).items():
            params[name].copy_(value)
    return model
