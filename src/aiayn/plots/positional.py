"""The sinusoidal positional encoding of §3.5 as pictures."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from aiayn.config import TransformerConfig
from aiayn.modules.embeddings import sinusoid_table
from aiayn.plots._figure import DEFAULT_SIZE, check_whole, new_figure

DEFAULT_DIMS = (4, 5, 6, 7)  # two sin/cos pairs of fairly high frequency
# The heatmap is about 900 pixels wide, so past a few thousand positions a column is under a pixel;
# 4096 is four times the paper's largest d_model. A 4096 x 4096 table drew in 1.5 GB; 10^7 positions
# asked for 20 GB before these bounds.
MAX_LENGTH = MAX_D_MODEL = 4096


def plot_positional(
    length: int = 100, d_model: int | None = None, dims: Sequence[int] = DEFAULT_DIMS,
    size: tuple[int, int] = DEFAULT_SIZE,
):
    """Heatmap of PE (positions x dimensions) above curves PE(pos, i) for the chosen dims.

    Even dimensions are sines, odd ones cosines; the wavelength grows geometrically with
    the dimension, from 2π to 10000·2π. Returns (figure, {"table", "positions", "dims"}).
    """
    d_model = TransformerConfig().d_model if d_model is None else d_model
    check_whole("length", length, 1, MAX_LENGTH)
    check_whole("d_model", d_model, 1, MAX_D_MODEL)
    if not len(dims):
        raise ValueError("dims must name at least one dimension to draw, got none")
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(f"dimensions {bad} outside 0..{d_model - 1}")
    table = sinusoid_table(length, d_model).numpy()  # (length, d_model)
    positions = np.arange(length)
    fig = new_figure(size)
    heat, curves = fig.subplots(2, 1, height_ratios=(3, 2))
    image = heat.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, origin="lower", interpolation="nearest")
    heat.set(title=f"sinusoidal positional encoding (§3.5), d_model={d_model}",
             xlabel="position", ylabel="dimension")
    fig.colorbar(image, ax=heat, label="PE(pos, i)")
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        curves.plot(positions, table[:, d], label=f"dim {d} ({kind})")
    curves.set(xlabel="position", ylabel="PE(pos, i)", xlim=(0, max(length - 1, 1)))
    curves.legend(loc="upper right", fontsize=8, ncol=min(len(dims), 4))
    return fig, {"table": table, "positions": positions, "dims": np.asarray(dims)}
