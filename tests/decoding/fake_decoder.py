"""A stand-in for `Transformer` whose next-token probabilities are set by hand.

It keeps each row's prefix in the real `KVCache` (as fake keys), so the search's
`reorder` calls move prefixes exactly as they move real keys and values.
"""

from __future__ import annotations

import math

import torch

from aiayn.cache import KVCache
from aiayn.config import EOS_ID, PAD_ID, TransformerConfig
from aiayn.model import DecoderOutput, EncoderOutput

A, B_, C, D, E = 4, 5, 6, 7, 8  # symbol ids


class FakeModel:
    """table: prefix (tuple of ids after BOS) -> {token: probability}; unlisted prefixes end."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 10):
        self.config = TransformerConfig.preset("tiny", src_vocab_size=vocab)
        self.table, self.vocab, self.calls = table, vocab, 0

    def encode(self, src: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(memory=None, src_mask=src != PAD_ID)

    def init_cache(self, enc: EncoderOutput, capacity: int = 64) -> KVCache:
        dummy = torch.zeros(enc.src_mask.shape[0], 1, 1, 1)
        return KVCache([(dummy, dummy)], enc.src_mask, capacity)

    def decode(self, tgt: torch.Tensor, cache: KVCache, need_weights: bool = False) -> DecoderOutput:
        self.calls += 1
        keys = tgt.float()[:, None, :, None]  # (N, 1, T, 1)
        prefix, _ = cache.append(0, keys, keys)
        cache.advance(tgt.shape[1])
        rows = [tuple(int(x) for x in p[1:]) for p in prefix[:, 0, :, 0].tolist()]  # drop BOS
        logits = torch.full((len(rows), 1, self.vocab), float("-inf"))
        for i, row in enumerate(rows):
            for tok, p in self.table.get(row, {EOS_ID: 1.0}).items():
                logits[i, 0, tok] = math.log(p)
        return DecoderOutput(logits, cache)
