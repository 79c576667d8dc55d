"""A model that implements only the decoding interface (`aiayn.decoding.interface`), with
next-token probabilities set by hand: no encoder, no cache, no `config`.

Its state is each row's prefix, so the search's `reorder` / `reorder_` calls move prefixes
exactly as they move a real model's keys and values; a wrong reorder shows as a wrong
hypothesis or score.
"""

from __future__ import annotations

import math

import torch

from aiayn.config import BOS_ID, EOS_ID

A, B_, C, D, E = 4, 5, 6, 7, 8  # symbol ids


class PrefixState:
    """prefix: (N, t) long, the tokens each row has fed so far (BOS first)."""

    def __init__(self, prefix: torch.Tensor):
        self.prefix = prefix

    def reorder(self, indices: torch.Tensor) -> "PrefixState":
        return PrefixState(self.prefix.index_select(0, indices))

    def reorder_(self, indices: torch.Tensor) -> "PrefixState":
        self.prefix = self.prefix.index_select(0, indices)
        return self


class FakeModel:
    """table: prefix (tuple of ids after BOS) -> {token: probability}; unlisted prefixes end (EOS 1.0)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 10,
                 max_output_length: int | None = None):
        self.table, self.vocab, self.calls = table, vocab, 0
        self.max_output_length = max_output_length

    def start(self, src: torch.Tensor, capacity: int = 64) -> PrefixState:
        return PrefixState(torch.empty(src.shape[0], 0, dtype=torch.long))

    def step(self, tokens: torch.Tensor, state: PrefixState) -> torch.Tensor:
        self.calls += 1
        state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (N, t + 1)
        logits = torch.full((len(tokens), self.vocab), float("-inf"))  # log-probabilities are valid logits
        for i, row in enumerate(state.prefix.tolist()):
            assert row[0] == BOS_ID
            for tok, p in self.table.get(tuple(row[1:]), {EOS_ID: 1.0}).items():
                logits[i, tok] = math.log(p)
        return logits
