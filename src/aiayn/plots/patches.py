"""Where a ViT's [CLS] token looks: its attention to each image patch, per layer (seed 004 §11).

Row 0 of an encoder-only model's self-attention is what [CLS] attends to; for a model whose input
is patches (`recipes/vit-digits.toml`), columns 1.. are the patches in row-major order, so each
layer's row reshapes to the patch grid and can be laid over the image.
"""

from __future__ import annotations

import math

import numpy as np

from aiayn.decoding.attention_maps import PatchAttention
from aiayn.plots._figure import DEFAULT_SIZE, new_figure


def plot_patch_attention(att: PatchAttention, layer: int | None = None, size: tuple[int, int] = DEFAULT_SIZE):
    """The digit, then [CLS]'s attention laid over it: one panel per layer (heads averaged), or with
    `layer` one panel per head of that layer. Returns (figure, arrays)."""
    n_layers, n_heads = att.cls.shape[:2]
    panels = [(i, None) for i in range(n_layers)] if layer is None else [(layer, h) for h in range(n_heads)]
    if layer is not None and not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} out of range: the model has layers 0..{n_layers - 1}")
    ncols = min(len(panels) + 1, 5)
    nrows = math.ceil((len(panels) + 1) / ncols)
    fig = new_figure(size)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    H, W = att.image.shape
    axes[0].imshow(att.image, cmap="gray_r", vmin=0, vmax=1)
    axes[0].set_title(f"label {att.label}, predicted {att.prediction} ({att.probability:.0%})", fontsize=9)
    arrays: dict[str, np.ndarray] = {"image": att.image}
    grids = [att.grid(i, h) for i, h in panels]
    top = max(float(g.max()) for g in grids) or 1.0  # one colour scale for every panel
    image = None
    for ax, (i, h), grid in zip(axes[1:], panels, grids):
        ax.imshow(att.image, cmap="gray_r", vmin=0, vmax=1)
        image = ax.imshow(grid, cmap="magma", alpha=0.6, extent=(-0.5, W - 0.5, H - 0.5, -0.5),
                          vmin=0, vmax=top, interpolation="nearest")
        ax.set_title(f"layer {i}" if h is None else f"layer {i}, head {h}", fontsize=9)
        arrays[f"layer{i}" + ("" if h is None else f"/head{h}")] = grid
    fig.suptitle("[CLS] -> patch attention" + (", mean of the heads" if layer is None else ""), fontsize=10)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[len(panels) + 1:]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    return fig, arrays
