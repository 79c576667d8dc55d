"""What a task is: the one place that knows a job's data, loss, validation and inference.

The trainer (`aiayn.training.trainer`) knows nothing of sources and targets: it asks the
task for the loss of a batch and for validation metrics. The pipeline
(`aiayn.training.pipeline`) only wires: it asks the task to prepare its data, builds the
model the task names through the model registry, and hands both to the trainer.

A new task: a class with the members of `Task`, listed in `aiayn.tasks.TASKS`, and a
recipe with `task = "<name>"`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import torch
from torch import nn

from aiayn.training.distributed import DistInfo
from aiayn.training.loss import LossSums


class TrainingBatch(Protocol):
    def to(self, device) -> "TrainingBatch":
        """The batch with its tensors on `device`."""


EpochData = Callable[[int], Sequence[TrainingBatch]]  # epoch -> this rank's micro-batches, deterministic


class Task(Protocol):
    name: str

    # -- data: how examples are read and batched ------------------------------------------
    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        """Read (or load from the preprocessing cache) and tokenize the data; build the vocabulary
        (`fresh`: a new run) or load the run's own (a resumed run). Every split the run will need,
        the test split included, is checked here, before any training."""

    def model_spec(self) -> tuple[str, Any]:
        """(model_type, model config) for `aiayn.models.build_model`, sized to the vocabulary."""

    def train_data(self, dist: DistInfo) -> EpochData: ...

    def valid_data(self) -> Optional[Sequence[TrainingBatch]]: ...

    # -- training: the loss -----------------------------------------------------------------
    def loss(self, model: nn.Module, batch: TrainingBatch) -> LossSums:
        """Summed loss (differentiable), summed NLL and the number of target tokens of `batch`."""

    def n_targets(self, batch: TrainingBatch) -> int:
        """The tokens `loss` sums over (known before the forward pass: the trainer normalises by it)."""

    # -- validation and test: what is measured ------------------------------------------------
    def validate(self, model: nn.Module) -> dict[str, float]:
        """Metrics beyond the loss (e.g. BLEU); {} for none."""

    def test(self, model_dir: Path, device, progress: Optional[Callable[[int], None]] = None) -> Optional[dict]:
        """Scores of a finished model on the test split, or None when the recipe names none."""

    # -- inference: the entry point ---------------------------------------------------------
    def save_extras(self, model_dir: Path) -> None:
        """Write what inference needs besides config and weights (e.g. the tokenizer)."""


# -- what every task writes beside the weights ---------------------------------------------------
log = logging.getLogger(__name__)

TOKENIZER_DIR = "tokenizer"  # in a run directory: the vocabulary the run trains with
TASK_FILE = "task.json"  # in a model directory: which task made it, and what its inference needs


def run_tokenizers(data, run_dir: Path, dist: DistInfo, fresh: bool, build: Callable[[], Any]):
    """The run's vocabulary: `data.tokenizer` if set; else RUN_DIR/tokenizer, made by `build()`
    (a `TokenizerPair`) on rank 0 for a fresh run (whatever an earlier, failed start left there),
    loaded when resuming. Every rank returns the same pair."""
    from aiayn.data.tokenizer import load_tokenizers, save_tokenizers

    if data.tokenizer:
        return load_tokenizers(data.tokenizer)
    directory = Path(run_dir) / TOKENIZER_DIR
    if dist.is_main and (fresh or not (directory / "tokenizer.json").is_file()):
        t = time.monotonic()
        save_tokenizers(build(), directory)
        log.info("vocabulary built in %.1f s -> %s", time.monotonic() - t, directory)
    if dist.enabled:
        torch.distributed.barrier()
    return load_tokenizers(directory)


def write_task_info(model_dir: str | Path, info: dict) -> None:
    """task.json, atomically; `info` holds at least {"task": name}."""
    from aiayn.io import atomic_write

    with atomic_write(Path(model_dir) / TASK_FILE) as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")


def read_task_info(model_dir: str | Path, expect: Optional[str] = None) -> dict:
    """The model directory's task.json ({} for a directory written before it existed: a translation
    model). With `expect`, a directory of another task is an error naming both."""
    path = Path(model_dir) / TASK_FILE
    info = {}
    if path.is_file():
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(info, dict):
            raise ValueError(f"{path}: expected a JSON object")
    found = info.get("task", "translation")
    if expect is not None and found != expect:
        raise ValueError(f"{model_dir}: a {found} model ({TASK_FILE}), not a {expect} model")
    return info
