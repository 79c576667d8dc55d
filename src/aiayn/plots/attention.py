"""Heatmaps of attention maps (`aiayn.decoding.attention_maps`): one part (encoder, decoder masked or
encoder-decoder attention) at one layer, per head (§3.2, Figure 3-5 of the paper)."""

from __future__ import annotations

import math

import numpy as np

from aiayn.decoding.attention_maps import PARTS, TITLES, AttentionMaps, PatchAttention, default_part
from aiayn.plots._figure import DEFAULT_SIZE, new_figure
from aiayn.plots.patches import plot_patch_attention


def draw(maps: AttentionMaps | PatchAttention, part: str | None = None, layer: int | None = None,
         head: int | None = None, size: tuple[int, int] = DEFAULT_SIZE):
    """What `aiayn plot attention` draws of a pipeline's `attention`: (figure, arrays). A ViT's patch
    attention is drawn per layer, or per head of `layer` (`part` and `head` do not apply)."""
    if isinstance(maps, PatchAttention):
        return plot_patch_attention(maps, layer, size)
    return plot_attention(maps, part, layer, head, size)


# -- drawing ---------------------------------------------------------------------------------
def _heatmap(ax, weights: np.ndarray, rows: list[str], cols: list[str], title: str,
             show_x: bool = True, show_y: bool = True):
    image = ax.imshow(weights, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    n = max(len(rows), len(cols))
    fontsize = 8 if n <= 20 else 6 if n <= 40 else 4
    for axis_ticks, labels, rotate, show in ((ax.set_xticks, cols, 90, show_x), (ax.set_yticks, rows, 0, show_y)):
        if show:
            axis_ticks(range(len(labels)), labels, fontsize=fontsize, rotation=rotate)
        else:
            axis_ticks([])
    return image


def _pick_layer(n_layers: int, layer: int | None) -> int:
    layer = n_layers - 1 if layer is None else layer
    if -n_layers <= layer < 0:  # Python-style index from the end
        layer += n_layers
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} out of range: the model has layers 0..{n_layers - 1}")
    return layer


def plot_attention(
    maps: AttentionMaps, part: str | None = None, layer: int | None = None, head: int | None = None,
    size: tuple[int, int] = DEFAULT_SIZE,
):
    """Heatmaps of one part ('encoder', 'decoder', 'cross' or 'all'; default: `default_part`) at one
    layer (default: the last).

    With `head` one heatmap per part; without, a grid of all heads. Returns (figure, arrays)
    where arrays holds the drawn weights and their axis labels.
    """
    part = part or default_part(maps)
    parts = tuple(p for p in PARTS if getattr(maps, p).shape[0]) if part == "all" else (part,)
    weights = {p: maps.part(p) for p in parts}
    layers = {p: _pick_layer(w.shape[0], layer) for p, w in weights.items()}
    n_heads = weights[parts[0]].shape[1]
    heads = list(range(n_heads)) if head is None else [head]
    if not all(0 <= h < n_heads for h in heads):
        raise ValueError(f"head {head} out of range: the model has heads 0..{n_heads - 1}")
    if len(parts) == 1 or len(heads) == 1:  # one row of parts, or a grid of one part's heads
        cells = [(p, h) for p in parts for h in heads]
        ncols = min(len(cells), 4) if len(parts) == 1 else len(parts)
        grid = [(p, h, divmod(i, ncols)) for i, (p, h) in enumerate(cells)]
        nrows = math.ceil(len(cells) / ncols)
    else:  # a row of heads per part
        ncols, nrows = len(heads), len(parts)
        grid = [(p, h, (r, c)) for r, p in enumerate(parts) for c, h in enumerate(heads)]
    fig = new_figure(size)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    arrays: dict[str, np.ndarray | list[str]] = {}
    image = None
    for p, h, (r, c) in grid:
        rows, cols = maps.labels(p)
        w = weights[p][layers[p], h]
        few, rows_are_parts = len(grid) <= 4, len(parts) > 1 and len(heads) > 1
        image = _heatmap(axes[r][c], w, rows, cols, f"{TITLES[p]}\nlayer {layers[p]}, head {h}",
                         show_x=few or rows_are_parts or r == nrows - 1, show_y=few or c == 0)
        arrays[f"{p}/layer{layers[p]}/head{h}"] = w
    for ax in axes.flat[len(grid):]:
        ax.set_visible(False)
    for p in parts:
        arrays[f"{p}/rows"], arrays[f"{p}/cols"] = maps.labels(p)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    return fig, arrays
