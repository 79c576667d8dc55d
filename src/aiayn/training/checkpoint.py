"""Training checkpoints: crash-safe directories under `RUN_DIR/checkpoints/`.

A checkpoint `ckpt_00001234/` (the update number) holds
    config.json + model.safetensors   the weights, via the model's `save_pretrained` (no pickle)
    tokenizer files + task.json       the task's extras (`save_extras`), written by the trainer: a
                                      checkpoint is a model directory every door opens
    trainer_state.pt                  optimizer + loss-scaler state, progress (step, epoch,
                                      batch index in the epoch's batch list, elapsed time,
                                      best validation, ...) and the RNG states of every rank
                                      (python, numpy, torch, cuda) as lists/tensors, so it
                                      loads with `torch.load(weights_only=True)`.
It is written into a hidden temporary directory and renamed into place, so a kill -9
mid-write leaves at most a `.tmp-*` directory that is ignored and removed later; the
previous checkpoints are untouched. `best/` is the checkpoint with the best validation NLL.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from aiayn.io import atomic_write, replace_dir

log = logging.getLogger(__name__)

CHECKPOINT_DIR, STATE_FILE, BEST = "checkpoints", "trainer_state.pt", "best"
MODEL_DIR = "model"  # RUN_DIR/model: the final model directory a run writes
_NAME = re.compile(r"^ckpt_(\d+)$")
# Test hook: seconds to sleep inside a checkpoint write, after the weights are on disk.
SLEEP_ENV = "AIAYN_CHECKPOINT_SLEEP"


@dataclass
class TrainState:
    """Where training stands. Mutable: the trainer advances it after every update."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # current epoch, from 0
    batch_index: int = 0  # next micro-batch in this epoch's (deterministic) batch list
    elapsed: float = 0.0  # training wall-clock seconds, summed over resumes
    best_score: float = float("-inf")  # of train.best_metric, higher is better (-nll for "nll")
    best_metric: str = ""  # the metric best_score is of ("" before 2026-11-28: the run's)
    best_step: int = 0
    bad_validations: int = 0  # validations since the last improvement (early stopping)
    bad_updates: int = 0  # non-finite updates in a row

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checkpoint_name(step: int) -> str:
    return f"ckpt_{step:08d}"


def list_checkpoints(root: str | Path) -> list[Path]:
    """`ckpt_*` directories under `root` with a complete state file, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and (p / STATE_FILE).is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Optional[Path]:
    found = list_checkpoints(root)
    return found[-1] if found else None


def run_dir_of(ckpt: str | Path) -> Path:
    """RUN_DIR of a checkpoint RUN_DIR/checkpoints/ckpt_N (of a model directory: its parent's parent)."""
    return Path(ckpt).resolve().parent.parent


def found_beside(ckpt: str | Path, name: str, run_subdirs: Sequence[str]) -> Optional[Path]:
    """The first directory holding the file `name`: the checkpoint (or model directory) `ckpt`
    itself, else each of `run_subdirs` of its run (`run_dir_of`); None where none does."""
    ckpt = Path(ckpt)
    return next((d for d in (ckpt, *(run_dir_of(ckpt) / s for s in run_subdirs)) if (d / name).is_file()), None)


# -- RNG state as plain lists/tensors (loadable with weights_only=True) ---------------------
def capture_rng() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- save / load ----------------------------------------------------------------------------
def save_checkpoint(
    root: str | Path, name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
    state: TrainState, rng: list[dict[str, Any]], scaler: Optional[Any] = None,
    extras: Optional[Callable[[Path], None]] = None,
) -> Path:
    """Write checkpoint `root/name` atomically (see the module docstring); returns its path.

    `model` must be the bare model (not a DDP wrapper); `rng` holds one entry per rank. `extras(dir)`
    writes what inference needs beside the weights (the task's tokenizer and task.json), so that a
    checkpoint is a model directory of its own.
    """
    root = Path(root)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    if extras is not None:
        extras(tmp)
    payload = {
        "format": 1, "state": state.to_dict(), "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None, "rng": rng,
    }
    with atomic_write(tmp / STATE_FILE) as f:
        torch.save(payload, f)
    if os.environ.get(SLEEP_ENV):
        time.sleep(float(os.environ[SLEEP_ENV]))
    replace_dir(tmp, final)
    log.info("saved checkpoint %s", final)
    return final


def load_checkpoint(
    path: str | Path, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None,
    scaler: Optional[Any] = None, rank: int = 0, world_size: int = 1,
) -> TrainState:
    """Load weights into `model` (and optimizer/scaler state), restore this rank's RNG
    state, and return the training progress. A damaged file is a ValueError naming it.

    The optimizer takes the checkpoint's moments and step counts but keeps its own settings
    (betas, eps, weight decay: the config's, which `--resume --set` may change), as fairseq's
    optimizer overrides do; the learning rate is the schedule's at every update anyway."""

    path = Path(path)
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: not found; is {path} a checkpoint directory?")
    payload = _read_payload(path)
    device = next(model.parameters()).device
    model.load_weights(weights, device)
    if optimizer is not None:
        settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        optimizer.load_state_dict(payload["optimizer"])
        for group, own in zip(optimizer.param_groups, settings):
            group.update(own)
    if scaler is not None and payload.get("scaler") is not None:
        scaler.load_state_dict(payload["scaler"])
    rngs = payload["rng"]
    if len(rngs) != world_size:
        log.warning("%s was written by %d process(es) and is resumed by %d: the data order and random state "
                    "will not continue exactly%s", path, len(rngs), world_size,
                    f" (rank {rank} reuses rank 0's RNG state)" if rank >= len(rngs) else "")
    restore_rng(rngs[rank if rank < len(rngs) else 0])
    return _train_state(payload)


def read_train_state(path: str | Path) -> TrainState:
    """The training progress (step, epoch, ...) of checkpoint directory `path`, without loading its model,
    and with its optimizer moments mapped from the file rather than read (`mmap`): a look, not a resume."""
    return _train_state(_read_payload(Path(path), mmap=True))


def _read_payload(path: Path, mmap: bool = False) -> dict:
    """The trainer state file of checkpoint directory `path`, as plain data (no pickle); errors name the file."""
    state_path = path / STATE_FILE
    if not state_path.is_file():
        raise FileNotFoundError(f"{state_path}: not found; is {path} a checkpoint directory?")
    try:
        payload = torch.load(state_path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # truncated / not a torch file
        raise ValueError(f"{state_path}: cannot read trainer state ({e})") from e
    missing = [k for k in ("state", "optimizer", "rng") if not isinstance(payload, dict) or k not in payload]
    if missing or not isinstance(payload["state"], dict):  # a torch file, but not one the trainer wrote
        raise ValueError(f"{state_path}: not a trainer state (no {', '.join(missing or ['state'])})")
    return payload


def _train_state(payload: dict) -> TrainState:
    state = dict(payload["state"])
    if "best_nll" in state:  # written before train.best_metric existed
        state["best_score"] = -state.pop("best_nll")
    return TrainState(**state)


def prune_checkpoints(root: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` `ckpt_*` directories and stale temp dirs."""
    root = Path(root)
    removed = list_checkpoints(root)[:-keep_last] if keep_last > 0 else []
    removed += [p for p in root.glob(".tmp-*") if p.is_dir()] if root.is_dir() else []
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed
