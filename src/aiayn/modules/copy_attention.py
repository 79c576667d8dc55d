"""Copy attention: the pointer-generator of See et al. (2017), "Get To The Point", §2.2. Not in the
paper; an option (`TransformerConfig.copy_attention`) for tasks whose outputs reuse input words.

The output distribution mixes generating a token with copying one from the source:

    p(w) = g · P_vocab(w) + (1 − g) · Σ_{i : x_i = w} a_i,     g = σ(w_g · h + b_g)

h is the decoder's final hidden state at the step, P_vocab the usual softmax over the vocabulary,
and a a one-head scaled dot-product attention from h over the encoder output (its keys W_k·memory
are computed once per source and kept in the `KVCache`, beside the cross-attention keys). Source and
target share one vocabulary, so a copied source id is already a target id: subwords cover every word
and no extended vocabulary is needed.

The mixture is returned as log-probabilities in place of logits. log_softmax leaves them as they are
(they already sum to 1), so the training losses and every decoder read them unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.modules.cache import KVCache


class CopyAttention(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.gate = nn.Linear(d_model, 1)

    def project_keys(self, memory: Tensor) -> Tensor:
        """Encoder output (n, S, D) -> copy keys (n, 1, S, D), for the cache."""
        return self.key(memory)[:, None]

    def forward(self, hidden: Tensor, logits: Tensor, cache: KVCache) -> Tensor:
        """hidden (K, T, D), logits (K, T, V) -> log p(w) (K, T, V), float32."""
        a = self.weights(hidden, cache)  # (n, 1, group·T, S)
        copied = a.new_zeros(*a.shape[:3], logits.shape[-1])  # (n, 1, group·T, V): once per source, like a
        copied.scatter_add_(3, cache.src_ids[:, None, None, :].expand_as(a), a)
        copied = cache.ungrouped(copied)[:, 0]  # (K, T, V)
        g = torch.sigmoid(self.gate(hidden).float())  # (K, T, 1)
        p = g * torch.softmax(logits.float(), dim=-1) + (1.0 - g) * copied
        return p.clamp_min(torch.finfo(p.dtype).tiny).log()

    def weights(self, hidden: Tensor, cache: KVCache) -> Tensor:
        """The copy attention a, with the rows that share a source together (`KVCache.grouped`):
        hidden (K, T, D) -> (n, 1, group·T, S), float32; each query's weights sum to 1 over its
        source's real tokens (0 for a source with none)."""
        q = cache.grouped(self.query(hidden)[:, None])  # (n, 1, group·T, D)
        scores = (q @ cache.copy_k.transpose(-1, -2)).float() / math.sqrt(hidden.shape[-1])  # (n, 1, group·T, S)
        if cache.cross_mask is not None:
            mask = cache.cross_mask if cache.has_source is None else cache.cross_mask | ~cache.has_source
            scores = scores.masked_fill(~mask, float("-inf"))
        a = torch.softmax(scores, dim=-1)
        return a if cache.has_source is None else a * cache.has_source  # a source with no token: nothing to copy
