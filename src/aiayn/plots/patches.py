"""Where a ViT's [CLS] token looks: its attention to each image patch, per layer (seed 004 §11).

Row 0 of an encoder-only model's self-attention is what [CLS] attends to; for a model whose input
is patches (`recipes/vit-digits.toml`), columns 1.. are the patches in row-major order, so each
layer's row reshapes to the patch grid and can be laid over the image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from aiayn.models.base import eval_mode
from aiayn.plots._figure import DEFAULT_SIZE, new_figure


@dataclass(frozen=True)
class PatchAttention:
    image: np.ndarray  # (H, W) pixels in [0, 1]
    cls: np.ndarray  # (L, heads, N): [CLS] -> patch weights; each (layer, head) row sums to 1 with the [CLS] column
    patch_size: int
    label: str
    prediction: str
    probability: float

    def draw(self, part: str | None = None, layer: int | None = None, head: int | None = None,
             size: tuple[int, int] = DEFAULT_SIZE):
        """`plot_patch_attention`: per layer, or per head of `layer` (`part` and `head` do not apply)."""
        return plot_patch_attention(self, layer, size)

    def describe(self) -> str:
        return f"label {self.label}, predicted {self.prediction} ({self.probability:.0%})"

    def grid(self, layer: int, head: int | None = None) -> np.ndarray:
        """(H/p, W/p) weights of one head, or the heads' mean when head is None."""
        weights = self.cls[layer].mean(0) if head is None else self.cls[layer, head]
        side = self.image.shape[0] // self.patch_size
        return weights.reshape(side, self.image.shape[1] // self.patch_size)


@torch.inference_mode()
def patch_attention(model, image: np.ndarray, patch_size: int, patches: np.ndarray, labels: list[str],
                    label: str) -> PatchAttention:
    """[CLS]'s attention to each patch of `image` (H, W), whose patches (N, p²) the model reads, and
    the model's prediction among `labels`; `label` is the image's own."""
    x = torch.from_numpy(patches[None])  # (1, N, p²)
    with eval_mode(model):
        weights = torch.stack([w[0, :, 0, 1:] for w in model.attention(x)])  # (L, heads, N)
        probs = model.classify(x)[0].float().softmax(-1)
    return PatchAttention(image, weights.numpy(), patch_size, label, labels[int(probs.argmax())], float(probs.max()))


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
