"""What a task is: the one place that knows a job's data, loss, validation and inference.

The trainer (`aiayn.training.trainer`) knows nothing of sources and targets: it asks the
task for the loss of a batch and for validation metrics. The pipeline
(`aiayn.training.pipeline`) only wires: it asks the task to prepare its data, builds the
model the task names through the model registry, and hands both to the trainer.

A new task: a class with the members of `Task` (its `data_config` and `pipeline` included), a
line in `aiayn.tasks.TASKS` (or named by its import path), and a recipe with `task = "<name>"`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import torch
from torch import nn

from aiayn.data.tokenizer import TOKENIZER_DIR, load_tokenizers, save_tokenizers
from aiayn.distributed import DistInfo
from aiayn.io import atomic_write
from aiayn.runtime import release_freed_memory
from aiayn.tasks.loss import LossSums


class TrainingBatch(Protocol):
    def to(self, device) -> "TrainingBatch":
        """The batch with its tensors on `device`."""


EpochData = Callable[[int], Sequence[TrainingBatch]]  # epoch -> this rank's micro-batches, deterministic


class Task(Protocol):
    name: str
    data_config: type  # the frozen dataclass of the recipe's [data] section for this task
    pipeline: type  # its inference door (`aiayn.tasks.pipeline.Pipeline`), built from a model directory
    tokenizers: Any  # the run's `TokenizerPair` once prepared (`train.init_from` compares it); None without text
    metrics: tuple[str, ...]  # what `validate` may report besides nll, loss and ppl (train.best_metric's choices)
    lower_is_better: tuple[str, ...]  # those of `metrics` where a smaller value wins (an error rate); others: larger

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

    def test(self, model_dir: Path, device, progress: Optional[Callable[..., None]] = None) -> Optional[dict]:
        """Scores of a finished model on the test split, or None when the recipe names none. `progress(n)`
        after each n examples, or `progress(n, total)` where the task knows how many there are."""

    # -- inference: the entry point ---------------------------------------------------------
    def save_extras(self, model_dir: Path) -> None:
        """Write what inference needs besides config and weights (e.g. the tokenizer)."""


# -- what every task writes beside the weights ---------------------------------------------------
log = logging.getLogger(__name__)

def run_tokenizers(data, run_dir: Path, dist: DistInfo, fresh: bool, build: Callable[[], Any]):
    """The run's vocabulary: `data.tokenizer` if set; else RUN_DIR/tokenizer, made by `build()`
    (a `TokenizerPair`) on rank 0 for a fresh run (whatever an earlier, failed start left there),
    loaded when resuming. Every rank returns the same pair."""
    if data.tokenizer:
        if not Path(data.tokenizer).is_dir():  # e.g. the model of a recipe meant to run first (sst2-mlm)
            raise FileNotFoundError(f"data.tokenizer = {data.tokenizer}: no such directory; train the run that "
                                    "writes it first, or drop data.tokenizer to build a vocabulary")
        return load_tokenizers(data.tokenizer)
    directory = Path(run_dir) / TOKENIZER_DIR
    if dist.is_main and (fresh or not (directory / "tokenizer.json").is_file()):
        t = time.monotonic()
        save_tokenizers(build(), directory)
        release_freed_memory()  # what the vocabulary's training held, before the corpus is tokenized
        log.info("vocabulary built in %.1f s -> %s", time.monotonic() - t, directory)
    if dist.enabled:
        torch.distributed.barrier()
    return load_tokenizers(directory)


def write_test_scores(model_dir: str | Path, result: dict) -> Path:
    """RUN_DIR/test_scores.json (beside the model directory), atomically: what `Task.test` reports."""
    path = Path(model_dir).parent / "test_scores.json"
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    return path


class Drops:
    """Examples a task cut, skipped or filtered, per split: each kind is logged once at WARNING and
    kept for the report (test_scores.json's "dropped", and "dropped_elsewhere" for the other splits)."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def note(self, split: str, what: str, n: int, total: int, detail: str = "") -> None:
        """`n` of `total` examples of `split` were `what` ("truncated", "too_long", ...); 0 notes nothing."""
        if n and self.counts.get(split, {}).get(what) != n:  # a split read twice is reported once
            log.warning("%s: %d of %d examples %s%s", split, n, total, what.replace("_", " "),
                        f" ({detail})" if detail else "")
            self.counts.setdefault(split, {})[what] = n

    def of(self, split: str) -> dict[str, int]:
        return dict(self.counts.get(split, {}))

    def besides(self, split: str) -> dict[str, dict[str, int]]:
        """The other splits' counts (training and validation, beside the test split's report)."""
        return {other: dict(counts) for other, counts in self.counts.items() if other != split}
