"""Training metrics: `metrics.jsonl` in the run directory, plus TensorBoard if installed.

One JSON object per line, the keys the plotting helper reads:
    {"step", "epoch", "split": "train"|"valid", "loss", "nll", "ppl", "lr",
     "tokens_per_s", "time" (seconds since the run started, across resumes),
     "bleu" (valid rows only, when computed)}
`loss` is the label-smoothed loss per target token, `nll` the unsmoothed one, ppl = e^nll.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Optional

from aiayn.io import atomic_write

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsWriter:
    """Appends rows to `run_dir/metrics.jsonl`; a disabled writer (non-zero ranks) does nothing."""

    def __init__(self, run_dir: str | Path, enabled: bool = True, tensorboard: bool = True):
        self.path = Path(run_dir) / METRICS_FILE
        self.enabled = enabled
        self._tb_dir = Path(run_dir) / "tensorboard" if enabled and tensorboard else None
        self._tb: Optional[Any] = None  # opened at the first row: a resumed, finished run writes nothing
        self._purge_step: Optional[int] = None  # after a resume: TensorBoard hides the events from here on

    def truncate_after(self, step: int) -> None:
        """Drop rows newer than `step` (after resuming from a checkpoint at `step`), and a row cut
        short by a crash while it was appended (logged): the file is rewritten atomically. TensorBoard's
        events past `step` are hidden as it reads them (SummaryWriter's `purge_step`)."""
        self._purge_step = step + 1
        if not self.enabled or not self.path.is_file():
            return
        rows = [line for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        kept = [r for r in rows if (row := _row(r, self.path)) is not None and row.get("step", 0) <= step]
        if len(kept) != len(rows):
            with atomic_write(self.path) as tmp:
                tmp.write_text("".join(r + "\n" for r in kept), encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(clean) + "\n")
        if self._tb is None and self._tb_dir is not None:
            self._tb = _tensorboard_writer(self._tb_dir, self._purge_step)
            self._tb_dir = None  # one try: tensorboard may not be installed
        if self._tb is not None:
            for key in ("loss", "nll", "ppl", "lr", "tokens_per_s", "bleu"):
                if isinstance(row.get(key), (int, float)):
                    self._tb.add_scalar(f"{row['split']}/{key}", row[key], row["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _row(line: str, path: Path) -> Optional[dict]:
    """A metrics row, or None (logged) for a line that is not one: the end of a row a crash cut short."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        row = None
    if not isinstance(row, dict):
        log.warning("%s: dropped a line that is not a whole row (a crash while it was written?): %.80s", path, line)
        return None
    return row


def _tensorboard_writer(directory: Path, purge_step: Optional[int] = None) -> Optional[Any]:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an optional extra
        return None
    return SummaryWriter(str(directory), purge_step=purge_step)
