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

import torch
from torch import Tensor

from aiayn.modules import masks
from aiayn.modules.cache_merge import concat


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


def _cross_masks(src_mask: Tensor) -> tuple[Tensor | None, Tensor | None]:
    """src_mask (n, S) -> (attention mask (n, 1, 1, S) or None, sources-with-tokens (n, 1, 1, 1) or None);
    see the module doc."""
    if bool(src_mask.all()):
        return None, None
    mask = masks.key_mask(src_mask)  # (n, 1, 1, S)
    has_key = masks.rows_with_keys(mask)  # (n, 1, 1, 1)
    return mask, (None if bool(has_key.all()) else has_key)
