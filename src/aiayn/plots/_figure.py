"""Shared figure helpers: headless Agg figures with an exact pixel size, saved atomically.

Figures are built with `matplotlib.figure.Figure` and the Agg canvas directly, never through
`pyplot`: nothing global is touched, so the plots work on servers without a display and do
not change the backend a notebook has chosen (a `Figure` still displays inline there).
"""

from __future__ import annotations

import numbers
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from aiayn.io import output_file

DPI = 100
DEFAULT_SIZE = (1000, 700)  # pixels (width, height)
MIN_SIDE = 50  # pixels: smaller leaves no room for a title and axis labels
# Agg holds the whole canvas in memory (4 bytes a pixel) and matplotlib several working copies:
# 5000x5000 took 0.7 GB, 10000x10000 2.2 GB, 100000x100000 failed to allocate (std::bad_alloc)
MAX_SIDE, MAX_PIXELS = 10_000, 25_000_000


def check_size(width: int, height: int) -> None:
    """A picture of width x height pixels is between MIN_SIDE a side and MAX_SIDE a side, MAX_PIXELS in all."""
    if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE) or width * height > MAX_PIXELS:
        raise ValueError(f"size must be from {MIN_SIDE}x{MIN_SIDE} to {MAX_SIDE}x{MAX_SIDE} pixels and at most "
                         f"{MAX_PIXELS:,} pixels in all, got {width}x{height}")


def check_whole(name: str, value, low: int, high: int) -> None:
    """`value` is a whole number from `low` to `high`; a ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")


def new_figure(size: tuple[int, int] = DEFAULT_SIZE, dpi: int = DPI) -> Figure:
    """A figure of exactly `size` pixels (width, height) when saved at `dpi`, with constrained layout."""
    width, height = size
    check_size(width, height)
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as a PNG at its own size and dpi (no tight bbox, so the pixel size is exact); a path
    named for another format (x.jpg) is an error rather than PNG bytes under that name."""
    path = Path(path)
    if path.suffix and path.suffix.lower() != ".png":
        raise ValueError(f"{path}: plots are written as PNG; name the file .png")
    with output_file(path, binary=True) as f:  # a link, FIFO or device is written through
        fig.savefig(f, format="png", dpi=fig.dpi)
    return path


def parse_size(text: str) -> tuple[int, int]:
    """'1000x700' -> (1000, 700), within `check_size`'s bounds."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"size must look like WIDTHxHEIGHT in pixels, e.g. 1000x700, got {text!r}") from None
    check_size(width, height)
    return width, height


def plain_log_ticks(axis, minor: bool = False) -> None:
    """Label a log-scale axis with plain numbers (16, not 2^4 in mathtext). `minor` labels the
    minor ticks too, for axes spanning less than a decade."""
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if minor else NullFormatter())
