"""Training curves from a run directory's `metrics.jsonl`.

One JSON object per line, written by the trainer as it goes:
    {"step", "epoch", "split": "train" | "valid", "loss", "nll", "ppl", "lr",
     "tokens_per_s", "bleu" (valid only), "time"}
The file may still be growing, so a last line without its newline that does not parse is
an unfinished write and is skipped; a bad line anywhere else is an error naming the line.
"""

from __future__ import annotations

from types import MappingProxyType

import json
import logging
from pathlib import Path

import numpy as np

from aiayn.plots._figure import DEFAULT_SIZE, new_figure, plain_log_ticks
from aiayn.training.metrics import METRICS_FILE

log = logging.getLogger(__name__)
PANELS = (("loss", "loss (label-smoothed)", "linear"), ("ppl", "perplexity", "log"),
          ("bleu", "BLEU", "linear"), ("lr", "learning rate", "linear"))
STYLE = MappingProxyType({"train": dict(color="tab:blue", linewidth=1, alpha=0.8),
         "valid": dict(color="tab:orange", linewidth=2, marker="o", markersize=3)})


def metrics_path(run: str | Path) -> Path:
    """A run directory or the metrics file itself -> the metrics file (must exist)."""
    run = Path(run)
    path = run / METRICS_FILE if run.is_dir() else run
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics file (expected a run directory holding {METRICS_FILE})")
    return path


def read_metrics(run: str | Path) -> list[dict]:
    """All complete records of a metrics file, in file order."""
    path = metrics_path(run)
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # no newline after it: still being written
                log.debug("%s:%d: skipping unfinished last line", path, number)
                continue
            raise ValueError(f"{path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(record, dict) or not _number(record.get("step")):
            raise ValueError(f"{path}:{number}: expected a JSON object with a numeric 'step' field")
        drawn = [key for key, _, _ in PANELS if record.get(key) is not None and not _number(record[key])]
        if drawn:
            raise ValueError(f"{path}:{number}: {drawn[0]} must be a number, got {record[drawn[0]]!r}")
        records.append(record)
    return records


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def series(records: list[dict], split: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one metric for one split, skipping records without it."""
    rows = [(r["step"], r[key]) for r in records if r.get("split") == split and r.get(key) is not None]
    steps, values = zip(*rows) if rows else ((), ())
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def _ppl(records: list[dict], split: str) -> tuple[np.ndarray, np.ndarray]:
    steps, ppl = series(records, split, "ppl")
    if not len(ppl):  # older writers: perplexity = exp(nll)
        steps, nll = series(records, split, "nll")
        ppl = np.exp(nll)
    return steps, ppl


def plot_curves(run: str | Path | list[dict], size: tuple[int, int] = DEFAULT_SIZE):
    """Loss, perplexity, BLEU and learning rate against update step, train and valid.

    `run` is a run directory, a metrics file, or already-read records. Returns
    (figure, {"<split>/<metric>": (steps, values)}).
    """
    records = run if isinstance(run, list) else read_metrics(run)
    if not records:
        raise ValueError(f"{run}: no metrics recorded yet")
    fig = new_figure(size)
    axes = fig.subplots(2, 2).flat
    arrays = {}
    for ax, (key, title, scale) in zip(axes, PANELS):
        for split in ("train", "valid"):
            steps, values = _ppl(records, split) if key == "ppl" else series(records, split, key)
            if len(values) and not (key == "lr" and ax.lines):  # one lr curve is enough
                ax.plot(steps, values, label=split, **STYLE[split])
                arrays[f"{split}/{key}"] = (steps, values)
        if ax.lines:
            ax.set(title=title, xlabel="update step", yscale=scale)
            if scale == "log":  # perplexity often spans less than a decade
                plain_log_ticks(ax.yaxis, minor=True)
            ax.legend(fontsize=8)
        else:
            ax.set_title(f"{title}: not recorded", fontsize=9)
            ax.set_axis_off()
    return fig, arrays
