"""The key/value cache for incremental decoding: the encoder-decoder's decoding state.

An explicit object: `Transformer.init_cache` (or `start`) makes one, `Transformer.decode`
(or `step`) takes it and appends to it. Nothing is hidden on modules, and everything one
decoding call needs lives here, so concurrent calls on one model never share state.
Cross-attention keys and values, and the cross-attention masks, are computed once per
source and kept once per source: the K beams of a sentence share them (beam search's rows
come in groups of `group` consecutive rows with one source), so expanding a batch to beams
copies nothing and cross-attention reads each source once per step. Self-attention keys and
values grow by one step per decoded token in preallocated buffers (no per-step `torch.cat`).

State, per decoder layer l (K = batch rows, beams included; n = K / group sources):
    cross_k[l], cross_v[l]: (n, H, S, Dh)   projected encoder output, fixed
    self_k[l],  self_v[l]:  (K, H, C, Dh)   buffers of capacity C >= length
    src_mask:               (n, S) bool     True at real source tokens
    copy_k, src_ids:        (n, 1, S, D), (n, S) long: copy attention's keys and the source ids,
                            for a model with `copy_attention` (`modules.copy_attention`); else None
    cross_mask:             (n, 1, 1, S) bool, or None when no source is padded
    has_source:             (n, 1, 1, 1) bool, or None when every source has a token;
                            rows without one attend to nothing and get zeros
    group:                  int             rows per source: rows g·j .. g·j + g - 1 decode source j
    length:                 int             target positions already decoded
    start:                  (K,) long, or None: row k's first valid self-attention column.
                            None (the usual case) means 0 for every row. Rows that joined a
                            running search later (`concat`, continuous batching) start further
                            right: their positions count from there, and the columns before it
                            are masked out of their self-attention.
    _spares:                {(name, l): buffer}: `reorder_`'s second self-attention buffers

It implements `aiayn.decoding.interface.DecoderState`: `reorder` (any rows) and
`reorder_` (in place, rows of the same source).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from aiayn.modules import masks


class KVCache:
    """The fields are those of the module doc, and no others (`__slots__`). The first four
    arguments start a cache for a new source; the keyword-only ones carry a running search's
    state (`self_only`, `concat`). `cross_masks` are `_cross_masks(src_mask)`, computed when not given."""

    __slots__ = ("cross_k", "cross_v", "src_mask", "copy_k", "src_ids", "cross_mask", "has_source",
                 "self_k", "self_v", "length", "capacity", "start", "group", "_spares")

    def __init__(self, cross_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor, capacity: int = 64,
                 copy_source: tuple[Tensor, Tensor] | None = None, *,
                 self_kv: tuple[list[Tensor | None], list[Tensor | None]] | None = None, length: int = 0,
                 start: Tensor | None = None, group: int = 1,
                 cross_masks: tuple[Tensor | None, Tensor | None] | None = None):
        self.cross_k = [k for k, _ in cross_kv]
        self.cross_v = [v for _, v in cross_kv]
        self.src_mask = src_mask
        self.copy_k, self.src_ids = copy_source if copy_source is not None else (None, None)
        self.cross_mask, self.has_source = _cross_masks(src_mask) if cross_masks is None else cross_masks
        self.self_k, self.self_v = ([None] * len(cross_kv), [None] * len(cross_kv)) if self_kv is None else self_kv
        self.length = length
        self.capacity = capacity
        self.start = start
        self.group = group
        self._spares: dict[tuple[str, int], Tensor] = {}

    @classmethod
    def self_only(cls, n_layers: int, batch: int, device: torch.device | str, capacity: int = 64) -> "KVCache":
        """A cache for a decoder without a source (decoder-only): self-attention keys/values only."""
        return cls([], torch.ones(batch, 0, dtype=torch.bool, device=device), capacity,
                   self_kv=([None] * n_layers, [None] * n_layers))

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this step's keys/values (K, H, t, Dh); return all so far (K, H, length + t, Dh)."""
        end = self.length + k.shape[2]
        buf_k, buf_v = self.self_k[layer], self.self_v[layer]
        if buf_k is None and self.length == 0:  # teacher forcing: keep the tensors, copy nothing
            self.self_k[layer], self.self_v[layer] = k, v
            return k, v
        if buf_k is None or buf_k.dtype != k.dtype or end > buf_k.shape[2]:
            buf_k, buf_v = self._grow(buf_k, k, end), self._grow(buf_v, v, end)
            self.self_k[layer], self.self_v[layer] = buf_k, buf_v
        buf_k[:, :, self.length:end] = k
        buf_v[:, :, self.length:end] = v
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def _grow(self, old: Tensor | None, new: Tensor, needed: int) -> Tensor:
        self.capacity = max(self.capacity, needed, 2 * (old.shape[2] if old is not None else 0))
        K, H, _, Dh = new.shape
        buf = new.new_empty(K, H, self.capacity, Dh)
        if old is not None and self.length:
            buf[:, :, : self.length] = old[:, :, : self.length]
        return buf

    def advance(self, steps: int) -> None:
        """Called once per decode call, after every layer has appended `steps` positions."""
        self.length += steps

    def reorder(self, indices: Tensor) -> "KVCache":
        """A cache whose row i is this cache's row indices[i] (K,) -> (K',).

        Beam search uses it to drop finished sentences and, with
        `arange(B).repeat_interleave(beam)`, to expand a batch to beams: rows that share a
        source share its cross-attention tensors (`group`), so that copies nothing.
        """
        return concat(self, None, indices, headroom=max(self.capacity - self.length, 1))

    def reorder_(self, indices: Tensor) -> "KVCache":
        """In place: row i of the self-attention keys/values becomes row indices[i] (K,) -> (K,).

        Cross-attention keys/values and src_mask are left as they are, so this is valid only
        when rows i and indices[i] decode the same source, as when beam search follows the
        beams of each sentence (it skips copying the cross-attention tensors every step).
        Use `reorder` to change which sources the rows hold. Only the filled positions move,
        and only the rows that change: most beams extend themselves (about 4 rows in 5 in
        decode_speed's beam search), so the rows that change are gathered and written back
        (two copies of those rows); when more than half change, all rows are copied once
        into a second buffer kept for the next call (no allocation per step). On CUDA all rows
        are copied every time: counting the moved rows would wait for the GPU.
        """
        if indices.is_cuda:
            return self._reorder_all_(indices)
        moved = (indices != torch.arange(indices.numel(), device=indices.device)).nonzero().squeeze(1)  # (C,)
        if moved.numel() == 0:
            return self
        if 2 * moved.numel() > indices.numel():
            return self._reorder_all_(indices)
        sources, L = indices[moved], self.length
        for bufs in (self.self_k, self.self_v):
            for buf in bufs:
                if buf is not None:
                    filled = buf[:, :, :L]  # (K, H, L, Dh)
                    filled.index_copy_(0, moved, filled.index_select(0, sources))  # read before written
        return self

    def _reorder_all_(self, indices: Tensor) -> "KVCache":
        spares = self._spares
        for layer in range(len(self.self_k)):
            for name, bufs in (("k", self.self_k), ("v", self.self_v)):
                buf = bufs[layer]
                if buf is None:
                    continue
                spare = spares.get((name, layer))
                if spare is None or spare.shape != buf.shape or spare.dtype != buf.dtype:
                    spare = torch.empty_like(buf)
                torch.index_select(buf[:, :, : self.length], 0, indices, out=spare[:, :, : self.length])
                bufs[layer], spares[(name, layer)] = spare, buf
        return self

    @property
    def batch_size(self) -> int:
        return self.src_mask.shape[0] * self.group

    def grouped(self, q: Tensor) -> Tensor:
        """Cross-attention queries (K, H, T, Dh) -> (n, H, group·T, Dh): the rows of a group become
        more query positions of their one source."""
        g = self.group
        if g == 1:
            return q
        K, H, T, Dh = q.shape
        return q.view(K // g, g, H, T, Dh).transpose(1, 2).reshape(K // g, H, g * T, Dh)

    def ungrouped(self, t: Tensor) -> Tensor:
        """The inverse of `grouped` for its results: (n, H, group·T, X) -> (K, H, T, X)."""
        g = self.group
        if g == 1:
            return t
        n, H, GT, X = t.shape
        return t.view(n, H, g, GT // g, X).transpose(1, 2).reshape(n * g, H, GT // g, X)

    def positions(self) -> Tensor | None:
        """(K,) long: each row's position for the next step, or None when every row is at `length`."""
        return None if self.start is None else self.length - self.start

    def self_mask(self) -> Tensor | None:
        """(K, 1, 1, length + 1) bool, True = may attend: the next step's self-attention mask, or
        None when every row sees every column."""
        if self.start is None:
            return None
        return masks.from_start(self.start, self.length + 1)


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
    return KVCache(cross_kv, src_mask, capacity, copy_source, self_kv=(self_k, self_v), length=length, start=start,
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


def _cross_masks(src_mask: Tensor) -> tuple[Tensor | None, Tensor | None]:
    """src_mask (n, S) -> (attention mask (n, 1, 1, S) or None, sources-with-tokens (n, 1, 1, 1) or None);
    see the module doc."""
    if bool(src_mask.all()):
        return None, None
    mask = masks.key_mask(src_mask)  # (n, 1, 1, S)
    has_key = masks.rows_with_keys(mask)  # (n, 1, 1, 1)
    return mask, (None if bool(has_key.all()) else has_key)
