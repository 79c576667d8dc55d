"""Small fixtures shared by the training tests: a tiny model and hand-made batches."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig

VOCAB = 12


@dataclass
class SimpleBatch:
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_tgt_tokens: int


def tiny_config(**overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", src_vocab_size=VOCAB, **overrides)


def make_batch(pairs: list[tuple[list[int], list[int]]]) -> SimpleBatch:
    """Pad (src ids, tgt ids) pairs: tgt_in = BOS + tgt, tgt_out = tgt + EOS."""
    S = max(len(s) for s, _ in pairs)
    T = max(len(t) for _, t in pairs) + 1
    src = torch.full((len(pairs), S), PAD_ID)
    tin = torch.full((len(pairs), T), PAD_ID)
    tout = torch.full((len(pairs), T), PAD_ID)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        tin[i, : len(t) + 1] = torch.tensor([BOS_ID] + t)
        tout[i, : len(t) + 1] = torch.tensor(t + [EOS_ID])
    return SimpleBatch(src, tin, tout, int((tout != PAD_ID).sum()))


def reverse_pairs(n: int, seed: int, min_len: int = 2, max_len: int = 6) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = [rng.randrange(4, VOCAB) for _ in range(rng.randint(min_len, max_len))]
        out.append((s, s[::-1]))
    return out


def batches(n_batches: int, per_batch: int, seed: int) -> list[SimpleBatch]:
    pairs = reverse_pairs(n_batches * per_batch, seed)
    return [make_batch(pairs[i * per_batch:(i + 1) * per_batch]) for i in range(n_batches)]
