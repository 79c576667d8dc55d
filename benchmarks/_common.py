"""Small helpers shared by the benchmark scripts: threads, timing, the fp32 peak, tables, --json.

Every benchmark prints a human table; with `--json` its last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

SHARED_DATA = Path(os.environ.get("AIAYN_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """--threads and --json, the same in every benchmark."""
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: all cores, os.cpu_count())")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last stdout line")


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (None: all cores) and return the number used."""
    n = threads or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def time_call(fn: Callable[[], object], device: str | torch.device = "cpu") -> float:
    """Wall seconds of one call of `fn`; on CUDA the queued kernels are waited for on both sides."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.float32,
                       device: str | torch.device = "cpu") -> float:
    """Best-of-`repeats` GFLOP/s of an (n, n) @ (n, n) matmul on `device` (2·n³ FLOPs).

    The best, not the median: other processes on a shared machine only ever slow it down.
    """
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    a @ b  # warm-up: thread pool, MKL/oneDNN or cuBLAS dispatch
    best = min(time_call(lambda: a @ b, device) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """Rows of dicts as an aligned text table. columns: (key, header, format spec such as ',.0f')."""
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([_fmt(row.get(key), spec) for key, _, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:  # NaN
        return "nan"
    return format(value, spec) if spec else str(value)


def allocator_name() -> str:
    """'tcmalloc', 'jemalloc' or 'glibc': the malloc this process runs with (e.g. via LD_PRELOAD)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown"
    for name in ("tcmalloc", "jemalloc"):
        if f"lib{name}" in maps:
            return name
    return "glibc"


def proc_memory_mb(pid: int) -> tuple[float, float]:
    """(resident memory, its peak) of process `pid` in MB, from /proc (VmRSS, VmHWM); NaN once it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        return float("nan"), float("nan")


def emit_json(obj: dict) -> None:
    """Print `obj` as one line of standard JSON (the last line a --json caller reads): NaN and the
    infinities, which json.dumps would write as bare words no strict parser reads, become null."""
    print(json.dumps(_finite(obj), allow_nan=False), flush=True)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def peer_installed(module: str, row: str) -> bool:
    """Whether the optional peer `module` imports; if not, says on stderr that `row` is left out."""
    import importlib
    import sys

    try:
        importlib.import_module(module)
        return True
    except ImportError as e:
        print(f"{row}: skipped: {module} does not import ({e}; pip install -e '.[bench]')", file=sys.stderr)
        return False
