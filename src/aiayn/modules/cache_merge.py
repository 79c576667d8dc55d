"""Continuous batching's merges of key/value caches (`aiayn.decoding.continuous`): the rows of a running
search that go on, and the new sentences that join it, in one new `KVCache`. Self-attention columns are
right-aligned, so a row that joined later starts further right (`KVCache.start`). Beam search's
`KVCache.reorder` is the same merge of one cache's chosen rows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:  # the cache's own `reorder` merges with `concat`: it imports this module
    from aiayn.modules.cache import KVCache


def concat(a: KVCache, b: KVCache | None = None, rows: Tensor | None = None, headroom: int = 16) -> KVCache:
    """The rows `rows` of `a` (all by default), then the rows of `b`, in one new cache: continuous
    batching drops the sentences that ended and adds new ones (b, nothing decoded yet) in one copy.

    Self-attention columns are right-aligned, so every row appends at the same column: a row
    with fewer positions gets `start` further right (see the module doc), and the leading columns
    that no kept row uses are dropped. Sources are padded to the longer S and kept once per group
    of rows that share one (`_groups`); a cache that keeps all its sources as they were shares
    them instead of copying. The self-attention buffers get `headroom` free columns. Both caches
    must come from the same model.
    """
    rows = torch.arange(a.batch_size, device=a.src_mask.device) if rows is None else rows
    a_start = _starts(a)[rows]  # (Na,) in a's columns
    if not rows.numel():
        first = a.length  # a's columns before `first` are unused
    else:  # every row at column 0 when start is None: no need to ask the device
        first = 0 if a.start is None else int(a_start.min())
    La, Lb = a.length - first, (0 if b is None else b.length)
    length = max(La, Lb)
    parts = [(a, rows, first, length - La)] + ([] if b is None else [(b, None, 0, length - Lb)])
    capacity = length + headroom
    start = torch.cat([a_start - first + (length - La)] + ([] if b is None else [_starts(b) + (length - Lb)]))
    if a.start is None and (b is None or (b.start is None and not bool(start.any()))):
        start = None  # every row at column 0: the usual cache, no masks or per-row positions
    S = max(c.src_mask.shape[1] for c, *_ in parts)
    group, sources = _groups([(c, r) for c, r, *_ in parts])
    src_mask = _stack([(c.src_mask, r) for c, r in sources], 1, S)
    cross_kv = _stack_cross(sources, len(a.cross_k), S)
    copy_source = None if a.copy_k is None else (_stack([(c.copy_k, r) for c, r in sources], 2, S),
                                                 _stack([(c.src_ids, r) for c, r in sources], 1, S))
    n = lambda c, r: c.batch_size if r is None else r.numel()  # noqa: E731
    self_k = [_stack_self([(c.self_k[i], r, n(c, r), f, c.length, pad) for c, r, f, pad in parts], capacity)
              for i in range(len(a.self_k))]
    self_v = [_stack_self([(c.self_v[i], r, n(c, r), f, c.length, pad) for c, r, f, pad in parts], capacity)
              for i in range(len(a.self_v))]
    return type(a)(cross_kv, src_mask, capacity, copy_source, self_kv=(self_k, self_v), length=length, start=start,
                   group=group, cross_masks=(a.cross_mask, a.has_source) if src_mask is a.src_mask else None)


def _starts(c: KVCache) -> Tensor:
    return torch.zeros(c.batch_size, dtype=torch.long, device=c.src_mask.device) if c.start is None else c.start


def _groups(parts: list[tuple[KVCache, Tensor | None]]) -> tuple[int, list[tuple[KVCache, Tensor | None]]]:
    """The rows of the parts (cache, its chosen rows or None for all), one after another, in groups:
    -> (g, the source rows each part keeps, one per g rows; None = all its sources as they are).
    g is the largest size such that every g consecutive rows of each part share a source: the
    gcd of the lengths of the runs of one source (a cache's own group when whole groups are kept;
    the beam size after `arange(B).repeat_interleave(beam)`)."""
    chosen = []
    for c, rows in parts:
        rows = torch.arange(c.batch_size, device=c.src_mask.device) if rows is None else rows
        chosen.append((c, rows // c.group))  # (K',) the source of each row
    runs = [torch.unique_consecutive(src, return_counts=True)[1].tolist() for _, src in chosen]
    g = math.gcd(*(n for counts in runs for n in counts)) or 1
    sources = []
    for c, src in chosen:
        src = src[::g]
        same = src.numel() == c.src_mask.shape[0] and bool((src == torch.arange(src.numel(), device=src.device)).all())
        sources.append((c, None if same else src))
    return g, sources


def _rows_of(t: Tensor, rows: Tensor | None, out: Tensor) -> None:
    """out[:] = t[rows] (or t). (index_select with out= into the strided block measured no faster,
    and refuses tensors that require grad.)"""
    out.copy_(t if rows is None else t.index_select(0, rows))


def _stack(parts: list[tuple[Tensor, Tensor | None]], dim: int, size: int) -> Tensor:
    """The chosen rows of each tensor, one part after another, `dim` zero-padded to `size`
    (a single tensor kept whole and unpadded is returned as it is: source tensors are never
    written in place)."""
    if len(parts) == 1 and parts[0][1] is None and parts[0][0].shape[dim] == size:
        return parts[0][0]
    counts = [t.shape[0] if r is None else r.numel() for t, r in parts]
    shape = list(parts[0][0].shape)
    shape[0], shape[dim] = sum(counts), size
    out = parts[0][0].new_empty(shape)
    begin = 0
    for (t, r), n in zip(parts, counts):
        block = out[begin:begin + n]
        _rows_of(t, r, block.narrow(dim, 0, t.shape[dim]))
        block.narrow(dim, t.shape[dim], size - t.shape[dim]).zero_()
        begin += n
    return out


def _stack_cross(sources: list[tuple[KVCache, Tensor | None]], layers: int, S: int) -> list[tuple[Tensor, Tensor]]:
    """Each layer's cross-attention keys and values of the chosen rows, stacked as `_stack` does. Layers
    that hold the same tensors in every source (a universal stack's one layer, step after step) share
    one stacked pair, as they shared the source's."""
    stacked: dict[tuple[int, ...], tuple[Tensor, Tensor]] = {}
    out = []
    for i in range(layers):
        key = tuple(id(t) for c, _ in sources for t in (c.cross_k[i], c.cross_v[i]))
        if key not in stacked:
            stacked[key] = (_stack([(c.cross_k[i], r) for c, r in sources], 2, S),
                            _stack([(c.cross_v[i], r) for c, r in sources], 2, S))
        out.append(stacked[key])
    return out


def _stack_self(parts, capacity: int) -> Tensor | None:
    """Self-attention buffers (N, H, capacity, Dh): each part's columns first..length of its chosen
    rows, after `pad` zero columns (masked, never NaN), so that all parts end at the same column."""
    present = [buf for buf, *_ in parts if buf is not None]
    if not present:
        return None
    _, H, _, Dh = present[0].shape
    out = present[0].new_empty(sum(p[2] for p in parts), H, capacity, Dh)
    begin = 0
    for buf, rows, n, first, length, pad in parts:
        block = out[begin:begin + n]
        block[:, :, :pad].zero_()
        if buf is not None and length > first:
            _rows_of(buf[:, :, first:length], rows, block[:, :, pad:pad + length - first])
        begin += n
    return out
