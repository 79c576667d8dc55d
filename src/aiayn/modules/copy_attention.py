"""Copy attention: the pointer-generator of See et al. (2017), "Get To The Point", §2.2. Not in the
paper; an option (`TransformerConfig.copy_attention`) for tasks whose outputs reuse input words.

The output distribution mixes generating a token with copying one from the source:

    p(w) = g · P_vocab(w) + (1 − g) · Σ_{i : x_i = w} a_i,     g = σ(w_g · h + b_g)

h is the decoder's final hidden state at the step, P_vocab the usual softmax over the vocabulary,
and a a one-head scaled dot-product attention from h over the encoder output (its keys W_k·memory
are computed once per source and kept in the `KVCache`, beside the cross-attention keys). Source and
target share one vocabulary, so a copied source id is already a target id: subwords cover every word
and no extended vocabulary is needed.

The copy term is nonzero only at the ≤ S source ids, so the mixture is computed as log(g·P_vocab)
everywhere with those ids overwritten (`copy_mixture`), not as a dense (K, T, V) copy distribution:
on one AESLC training update the copy mixture and the loss, forward and backward, take 154 ms
instead of 268 ms (75 instead of 111 with `runtime.keep_freed_memory`; 2 cores,
`benchmarks/cpu_training_ops.py`).

The mixture is returned as log-probabilities in place of logits. log_softmax leaves them as they are
(they already sum to 1), so the training losses and every decoder read them unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.modules import masks
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
        """hidden (K, T, D), logits (K, T, V) -> log p(w) (K, T, V), float32 (float64 for a float64 model)."""
        a = cache.ungrouped(self.weights(hidden, cache))[:, 0]  # (K, T, S)
        src_ids = cache.src_ids.repeat_interleave(cache.group, dim=0)  # (K, S): each row's source
        return copy_mixture(logits, torch.sigmoid(self.gate(hidden).to(a.dtype)), a, src_ids)

    def weights(self, hidden: Tensor, cache: KVCache) -> Tensor:
        """The copy attention a, with the rows that share a source together (`KVCache.grouped`):
        hidden (K, T, D) -> (n, 1, group·T, S), float32 (float64 for a float64 model); each query's
        weights sum to 1 over its source's real tokens (0 for a source with none)."""
        q = cache.grouped(self.query(hidden)[:, None])  # (n, 1, group·T, D)
        keys = cache.copy_k.to(q.dtype)  # bf16 where the encoder ran under autocast (`FastDecoder.start`)
        q = q / math.sqrt(hidden.shape[-1])  # scaled before the product: unscaled, an fp16 product can overflow
        scores = (q @ keys.transpose(-1, -2)).to(_at_least_float32(q.dtype))  # (n, 1, group·T, S)
        if cache.cross_mask is not None:
            mask = cache.cross_mask if cache.has_source is None else masks.open_empty_rows(cache.cross_mask,
                                                                                           cache.has_source)
            scores = scores.masked_fill(~mask, float("-inf"))
        a = torch.softmax(scores, dim=-1)
        return a if cache.has_source is None else a * cache.has_source  # a source with no token: nothing to copy


def copy_mixture(logits: Tensor, g: Tensor, a: Tensor, src_ids: Tensor) -> Tensor:
    """log(g·softmax(logits) + (1 − g)·copy), the copy term Σ_{i : x_i = w} a_i given at the source ids only.

    logits (K, T, V); g (K, T, 1) the gate; a (K, T, S) the copy attention; src_ids (K, S) -> (K, T, V).
    A source id at several positions gathers their attention at its first one (`_first_positions`):
    S-wide work, none over the vocabulary or S x S.
    """
    first_pos = _first_positions(src_ids, logits.shape[-1])[:, None, :].expand_as(a)  # (K, T, S)
    c = torch.zeros_like(a).scatter_add_(-1, first_pos, a).gather(-1, first_pos)  # (K, T, S): a summed over the id
    first = first_pos == torch.arange(a.shape[-1], device=a.device)  # (K, T, S): the position carrying its id
    return _CopyMixture.apply(logits, g, c, src_ids[:, None, :].expand_as(a), first)


def _first_positions(src_ids: Tensor, vocab_size: int) -> Tensor:
    """(K, S) ids -> (K, S) long: for each position, the first position of its row holding the same id."""
    K, S = src_ids.shape
    positions = torch.arange(S, device=src_ids.device, dtype=torch.int32).expand(K, S)
    first_of_id = torch.full((K, vocab_size), S, device=src_ids.device, dtype=torch.int32)  # (K, V)
    return first_of_id.scatter_reduce_(1, src_ids, positions, "amin").gather(1, src_ids).long()


def _at_least_float32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


class _CopyMixture(torch.autograd.Function):
    """log(g·P + (1 − g)·copy), P = softmax(logits), with the copy term given only at the source ids.

    Inputs: logits (K, T, V); g (K, T, 1); c (K, T, S) the copy probability of the id at each source
    position (summed over the positions that hold it); ids (K, T, S) long, those ids; first (K, T, S)
    bool, the first position of its id (the one that carries its gradient). Output (K, T, V).

    For an id w outside the source, log p(w) = log g + log P(w); at a source id, p = g·P + (1 − g)·c.
    With r(w) = ∂ log p(w)/∂ log P(w) (1 outside the source, g·P(w)/p(w) in it) and G the incoming
    gradient, the backward is: ∂/∂logits = r·G − P·Σ r·G;  ∂/∂g = Σ_outside G/g + Σ_source G·(P − c)/p;
    ∂/∂c = G·(1 − g)/p.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, g: Tensor, c: Tensor, ids: Tensor, first: Tensor) -> Tensor:
        z = logits.to(c.dtype)  # (K, T, V), float32 at least
        lse = torch.logsumexp(z, dim=-1, keepdim=True)  # (K, T, 1)
        tiny = torch.finfo(c.dtype).tiny
        out = z - (lse - g.clamp_min(tiny).log())  # (K, T, V): log(g·P)
        p_vocab = (z.gather(-1, ids) - lse).exp()  # (K, T, S): P at the source ids
        p = torch.lerp(c, p_vocab, g).clamp_min(tiny)  # (K, T, S): g·P + (1 − g)·c
        out.scatter_(-1, ids, p.log())
        ctx.save_for_backward(logits, lse, g, c, ids, first, p_vocab, p)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, lse, g, c, ids, first, p_vocab, p = ctx.saved_tensors
        grad_src = grad.gather(-1, ids)  # (K, T, S)
        rg = grad.scatter(-1, ids, grad_src * g * p_vocab / p)  # (K, T, V): r·G
        vocab = (logits.to(lse.dtype) - lse).exp_()  # (K, T, V): P
        grad_logits = torch.addcmul(rg, vocab, rg.sum(-1, keepdim=True), value=-1)
        once = grad_src * first  # each source id counted once
        grad_g = ((grad.sum(-1, keepdim=True) - once.sum(-1, keepdim=True)) / g.clamp_min(torch.finfo(g.dtype).tiny)
                  + (once * (p_vocab - c) / p).sum(-1, keepdim=True))
        grad_c = once * (1 - g) / p
        return grad_logits.to(logits.dtype), grad_g, grad_c, None, None
