"""Table 1 of the paper as a picture: one layer's time against sequence length n, from the
JSON that `benchmarks/layer_complexity.py --json` prints (its last line). One panel per width
d; the dotted line marks n = d, where self-attention's O(n²·d) meets recurrence's O(n·d²)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aiayn.io import read_utf8
from aiayn.plots._figure import DEFAULT_SIZE, new_figure, plain_log_ticks


def read_results(path: str | Path) -> list[dict]:
    """The rows of a layer_complexity JSON object (a file holding it, or ending with it)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (write it with: python benchmarks/layer_complexity.py --json)")
    lines = [line for line in read_utf8(path).splitlines() if line.strip()]
    try:
        rows = json.loads(lines[-1])["rows"] if lines else None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not the --json output of benchmarks/layer_complexity.py ({e})") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and {"layer", "d", "n", "ms"} <= r.keys()
                                                          for r in rows):
        raise ValueError(f"{path}: no layer_complexity rows (layer, d, n, ms)")
    return rows


def plot_complexity(results: str | Path | list[dict], size: tuple[int, int] = DEFAULT_SIZE):
    """Time (ms, log) against n (log) per layer type, a panel per d. Returns (figure, arrays)."""
    rows = read_results(results) if not isinstance(results, list) else results
    widths = sorted({r["d"] for r in rows})
    fig = new_figure(size)
    axes = fig.subplots(1, len(widths), squeeze=False)[0]
    arrays: dict[str, np.ndarray] = {}
    for ax, d in zip(axes, widths):
        for layer in dict.fromkeys(r["layer"] for r in rows):
            points = sorted((r["n"], r["ms"]) for r in rows if r["d"] == d and r["layer"] == layer)
            if points:
                n, ms = np.array(points).T
                ax.plot(n, ms, marker="o", label=layer)
                arrays[f"d{d}/{layer}"] = np.array(points)
        ax.axvline(d, color="grey", linestyle=":", label=f"n = d = {d}")
        ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="forward + backward (ms)",
               title=f"one layer, d = {d}")
        plain_log_ticks(ax.xaxis)
        plain_log_ticks(ax.yaxis)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return fig, arrays
