"""Continuous (iteration-level) beam search: sentences join and leave a running search between steps.

A server that batches whole requests decodes each batch until its last sentence ends. Meanwhile
the batch thins out as sentences finish, and requests that arrive wait for the next batch; with
clients that send again as soon as they are answered, they settle into groups that take turns.
Continuous batching (Orca, Yu et al., OSDI 2022; the scheduler of vLLM and TGI) lets a new
sentence join at the next step and a finished one leave at once, so the rows in flight stay as
many as the clients.

Each sentence is searched exactly as `beam.beam_search` searches it alone: the same `advance`
step, scores and early stopping. Rows are independent; a sentence that joined later has its own
positions, and its self-attention masks out the columns before its own (`KVCache.start`). The
tests check every sentence's n-best list against `beam_search` on that sentence alone.

    search = ContinuousBeamSearch(decoder, DecodeConfig(), device)
    search.add([ids_a, ids_b], keys=[1, 2])   # sources: token ids + EOS (`encode_source`)
    while search:                             # more sentences may be added between steps
        for key, hyps in search.step(): ...   # n-best `Hypothesis` lists, best first

The decoder's `step` must handle rows at different positions (`ragged_steps = True`, as
`FastDecoder` does); `Translator.continuous` falls back to whole batches otherwise.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from aiayn.config import PAD_ID, DecodeConfig
from aiayn.decoding.beam import Hypothesis, _State, advance, start_beams
from aiayn.decoding.common import banned_tokens, pad_sources
from aiayn.modules.cache import KVCache
from aiayn.modules.cache_merge import concat


class ContinuousBeamSearch:
    """Beam search over a set of sentences that changes between steps. Not thread-safe: one
    worker drives it (the server's batcher).

    Joining costs an encoder call and a copy of the cache, so new sentences wait in `pending`
    and join together: every `join_every` steps, at once when nothing runs, and at the first step
    after a sentence ended. A sentence that ends leaves the search at once and its rows are never
    decoded again: at the start of the next step one copy of the cache (`concat`) drops them,
    keeps the other rows in their new beam order (`live`) and adds the sentences waiting to join.
    (This search once fed the ended rows EOS until the next join, every `join_every` steps, and
    decoded them for nothing meanwhile.)
    """

    def __init__(self, decoder, config: DecodeConfig, device: torch.device | str = "cpu", join_every: int = 4):
        if not getattr(decoder, "ragged_steps", False):
            raise ValueError(f"{type(decoder).__name__} cannot step rows at different positions: "
                             "decode whole batches with beam_search")
        if config.method != "beam" or config.beam_size < 2:
            raise ValueError(f"continuous search is beam search (beam_size >= 2); got {config.method!r} "
                             f"with beam_size {config.beam_size}")
        self.decoder, self.config, self.device = decoder, config, torch.device(device)
        self.join_every = join_every
        self.bans = banned_tokens(self.device)[0]
        self.cache: KVCache | None = None
        self.beams: _State | None = None
        self.live: Tensor | None = None  # (N',) cache row of each beam row after sentences ended; None: the same rows
        self.pending: list[tuple[list[int], int]] = []  # (source ids, key) waiting to join
        self.finished: dict[int, list[Hypothesis]] = {}
        self.since_join = 0

    def __len__(self) -> int:
        """Sentences not yet ended: searching or waiting to join."""
        return (0 if self.beams is None else self.beams.ids.numel()) + len(self.pending)

    def add(self, sources: Sequence[Sequence[int]], keys: Sequence[int]) -> None:
        """Search `sources` (token ids + EOS each) under `keys` (ints, unique in flight), from a coming step."""
        if len(sources) != len(keys):
            raise ValueError(f"need as many keys as sources, got {len(keys)} and {len(sources)}")
        self.pending += [(list(ids), int(key)) for ids, key in zip(sources, keys)]

    @torch.inference_mode()
    def cancel(self, keys: Sequence[int]) -> int:
        """Drop the sentences under `keys`, waiting or searching: a searching one's rows leave the
        cache at the next step's join, as an ended sentence's do, and are never decoded again.
        Returns how many sentences were dropped (unknown or ended keys are ignored)."""
        gone = {int(k) for k in keys}
        waiting = len(self.pending)
        self.pending = [(ids, key) for ids, key in self.pending if key not in gone]
        dropped = waiting - len(self.pending)
        for key in gone:
            self.finished.pop(key, None)
        if self.beams is None:
            return dropped
        b, K = self.beams, self.config.beam_size
        keep = ~torch.isin(b.ids, torch.tensor(sorted(gone), dtype=b.ids.dtype))  # (B',) on the CPU, as ids
        if bool(keep.all()):
            return dropped
        on = keep.to(b.last.device)
        rows = torch.arange(b.last.numel(), device=b.last.device) if self.live is None else self.live  # (B'·K,)
        self.beams = _State(b.last.view(-1, K)[on].reshape(-1), b.scores[on], b.history[on], b.start[on],
                            b.limits[on], b.ids[keep], b.finished)
        self.live = rows.view(-1, K)[on].reshape(-1)  # the cache rows of the beams kept
        if self.beams.ids.numel() == 0:
            self.cache = self.beams = self.live = None
        return dropped + int((~keep).sum())

    @torch.inference_mode()
    def step(self) -> list[tuple[int, list[Hypothesis]]]:
        """Advance every sentence by one token; -> (key, n-best list) of each sentence that ended."""
        if self.live is not None or (self.pending and self._time_to_join()):
            self._join()  # never decode the rows of a sentence that ended
        if self.beams is None:
            return []
        self.since_join += 1
        logits = self.decoder.step(self.beams.last, self.cache)  # (N, V): every cache row is a live beam
        logp = torch.log_softmax(logits.float(), dim=-1).index_fill_(1, self.bans, float("-inf"))
        before = self.beams.ids.tolist()
        self.beams, rows = advance(self.beams, logp, self.config)
        still = set(self.beams.ids.tolist()) if len(before) != self.beams.ids.numel() else set(before)
        ended = [key for key in before if key not in still]
        self._follow(rows, bool(ended))
        nbest = self.config.nbest
        return [(key, sorted(self.finished.pop(key), key=lambda h: -h.score)[:nbest]) for key in ended]

    def _follow(self, rows: Tensor, left: bool) -> None:
        """Reorder the cache as the beams moved (`rows`: the old beam rows kept, in the new order).
        When sentences ended, their rows leave the cache at the next step's join, in one copy with
        the kept rows in their new order and the sentences that arrived meanwhile."""
        if self.beams.ids.numel() == 0:
            self.cache = self.beams = self.live = None
        elif left:
            self.live = rows
        else:
            self.cache.reorder_(rows)  # the usual beam step: beams moved within their sentence

    def _time_to_join(self) -> bool:
        return self.beams is None or self.since_join >= self.join_every

    def _join(self) -> None:
        """Encode the pending sources and add them; drop the ended sentences' rows in the same copy."""
        if not self.pending:
            self.cache, self.live = self.cache.reorder(self.live), None
            return
        sources, keys = [s for s, _ in self.pending], [k for _, k in self.pending]
        self.pending, self.since_join = [], 0
        for key in keys:
            self.finished[key] = []
        src = pad_sources(sources, PAD_ID, self.device)  # (B, S)
        ids = torch.tensor(keys, dtype=torch.long)  # on the CPU: bookkeeping (`beam._State`)
        state, new = start_beams(self.decoder, src, self.config, ids, self.finished)
        if self.beams is None:
            self.cache, self.beams = state, new
        else:  # one copy keeps the live rows, drops the leading columns none of them uses, adds the new rows
            self.cache = concat(self.cache, state, self.live)
            self.beams = _concat_beams(_trim_beams(self.beams), new)
        self.live = None


def _concat_beams(a: _State, b: _State) -> _State:
    """a's sentences, then b's (nothing decoded yet): b's history starts at a's width (right-aligned)."""
    W = a.history.shape[2]
    Bb, K, _ = b.history.shape
    history = torch.cat([a.history, a.history.new_zeros(Bb, K, W)])  # (Ba + Bb, K, W)
    return _State(torch.cat([a.last, b.last]), torch.cat([a.scores, b.scores]), history,
                  torch.cat([a.start, b.start + W]), torch.cat([a.limits, b.limits]), torch.cat([a.ids, b.ids]),
                  a.finished)


def _trim_beams(s: _State) -> _State:
    """Drop the leading history columns no sentence uses (as `cache.concat` does to the cache)."""
    drop = int(s.start.min())
    if drop == 0:
        return s
    return _State(s.last, s.scores, s.history[:, :, drop:], s.start - drop, s.limits, s.ids, s.finished)
