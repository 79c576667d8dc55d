"""The attention masks of `aiayn.modules.masks` as pictures (True = may attend, drawn bright)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from aiayn.modules import masks
from aiayn.config import PAD_ID
from aiayn.plots._figure import check_whole, new_figure

SIZE = (1000, 420)  # three square panels side by side
# Every position gets a tick and a grid cell, and a panel is about 300 pixels wide at SIZE: past a
# few hundred positions a cell is under a pixel and the picture is grey. (100,000 asked for 24 GB.)
MAX_POSITIONS = 256


def example_batch(lengths: Sequence[int], pad_id: int = PAD_ID) -> torch.Tensor:
    """A padded batch (B, max length) of dummy token ids with the given lengths."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"lengths must be positive integers, got {list(lengths)}")
    if len(lengths) > MAX_POSITIONS or max(lengths) > MAX_POSITIONS:
        raise ValueError(f"lengths must be at most {MAX_POSITIONS} sentences of at most {MAX_POSITIONS} tokens, "
                         f"got {len(lengths)} sentences, the longest {max(lengths)}")
    batch = torch.full((len(lengths), max(lengths)), pad_id, dtype=torch.long)
    for row, n in enumerate(lengths):
        batch[row, :n] = torch.arange(n) + pad_id + 1 + 3  # any non-pad ids
    return batch


def _draw(ax, mask: np.ndarray, title: str, xlabel: str, ylabel: str) -> None:
    ax.imshow(mask, cmap="Greys_r", vmin=0, vmax=1, aspect="equal", interpolation="nearest")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_xticks(range(mask.shape[1]))
    ax.set_yticks(range(mask.shape[0]))
    ax.tick_params(labelsize=7)
    ax.set_xticks(np.arange(-0.5, mask.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, mask.shape[0]), minor=True)
    ax.grid(which="minor", color="tab:gray", linewidth=0.5)
    ax.tick_params(which="minor", length=0)


def plot_masks(lengths: Sequence[int] = (5, 3, 7), tgt_len: int = 6, size: tuple[int, int] = SIZE):
    """Three panels: the padding mask of a batch with these source lengths (B x S), the
    causal mask (T x T, §3.2.3), and the decoder's self-attention mask of a padded target
    (causal & padding) for the shortest sentence, all built by `aiayn.modules.masks`.
    """
    check_whole("tgt_len", tgt_len, 1, MAX_POSITIONS)
    batch = example_batch(lengths)
    padding = masks.padding_mask(batch, PAD_ID).numpy()  # (B, S)
    causal = masks.causal_mask(tgt_len).numpy()  # (T, T)
    tgt = example_batch([min(min(lengths), tgt_len), tgt_len])[:1]  # (1, T) with padding
    combined = (masks.key_mask(masks.padding_mask(tgt, PAD_ID)) & masks.causal_mask(tgt_len))[0, 0].numpy()
    fig = new_figure(size)
    left, middle, right = fig.subplots(1, 3)
    _draw(left, padding, "padding mask (True = real token)", "source position", "sentence in batch")
    _draw(middle, causal, "causal mask (§3.2.3)", "key position", "query position")
    _draw(right, combined, f"causal & padding\n(target of length {int(tgt[0].ne(PAD_ID).sum())})",
          "key position", "query position")
    fig.suptitle("attention masks: white = may attend, black = masked (weight 0)")
    return fig, {"padding": padding, "causal": causal, "causal_and_padding": combined,
                 "lengths": np.asarray(lengths)}
