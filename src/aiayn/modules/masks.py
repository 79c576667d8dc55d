"""Attention masks, built here and nowhere else.

One polarity throughout: a boolean mask where **True means "may attend"**. This is what
`torch.nn.functional.scaled_dot_product_attention` reads, so nothing is inverted before
the kernel. Masks combine with `&`. Shapes broadcast to (B, H, Tq, Tk).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """True at real tokens. (B, S) -> (B, S)."""
    return tokens != pad_id


def key_mask(keep: Tensor) -> Tensor:
    """Per-key mask as an attention mask. (B, Tk) -> (B, 1, 1, Tk)."""
    return keep[:, None, None, :]


def causal_mask(length: int, past: int = 0, device: torch.device | None = None) -> Tensor:
    """Query i (absolute position past + i) may attend key j iff j <= past + i.

    Returns (length, past + length): the §3.2.3 mask that keeps decoding auto-regressive.
    """
    q = torch.arange(past, past + length, device=device)[:, None]
    k = torch.arange(past + length, device=device)[None, :]
    return k <= q


def from_start(start: Tensor, length: int) -> Tensor:
    """Each row may attend the keys from its own `start` on (right-aligned rows of a decoding cache).
    (K,) -> (K, 1, 1, length)."""
    columns = torch.arange(length, device=start.device)
    return key_mask(columns[None, :] >= start[:, None])


def rows_with_keys(mask: Tensor) -> Tensor:
    """True for query rows that may attend at least one key. (..., Tq, Tk) -> (..., Tq, 1)."""
    return mask.any(dim=-1, keepdim=True)


def open_empty_rows(mask: Tensor, has_key: Tensor) -> Tensor:
    """`mask` with the rows that may attend no key (`has_key` False) opened to every key, so that a
    softmax over them stays finite (no NaN, gradients included); the caller zeroes those rows after.
    (..., Tq, Tk), (..., Tq, 1) -> (..., Tq, Tk)."""
    return mask | ~has_key
