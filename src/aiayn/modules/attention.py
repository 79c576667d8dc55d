"""Scaled dot-product and multi-head attention (§3.2).

`attention` is equation 1 as the paper writes it; `MultiHeadAttention` runs it per head. What a model
calls, `scaled_dot_product_attention`, computes the same with torch's fused kernel where that is fast and
explicit matmuls where the weights are wanted or bf16 training on a CPU makes the kernel slow; its
tests hold it to `attention`. Additive attention (Bahdanau et al.), which §3.2.1 compares with, is last.

Masks are boolean with True = may attend (see `aiayn.modules.masks`), broadcastable to
(B, H, Tq, Tk). A query row with no key to attend yields zeros, never NaN (the paper's formula gives NaN).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.modules import masks
from aiayn.modules.dropout import dropout as _dropout
from aiayn.modules.embeddings import normal_init_


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention(Q, K, V) = softmax(QKᵀ / √d_k) V (§3.2.1, equation 1). q: (B, H, Tq, Dh), k/v: (B, H, Tk, Dh)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, Tq, Dh)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2).

    The projections W^Q, W^K, W^V are stacked in one (3D, D) matrix, laid out as in
    `torch.nn.MultiheadAttention.in_proj_weight`: self-attention projects with one
    matmul; cross-attention projects queries and keys/values separately, the latter once
    per source when decoding with a cache.

    Shape:
        query: (B, Tq, D); key_value: (B, Tk, D) or None for self-attention
        mask: bool, broadcastable to (B, H, Tq, Tk), True = may attend
        output: (B, Tq, D); weights: (B, H, Tq, Tk) when need_weights
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, score: str = "scaled_dot"):
        super().__init__()
        self.n_heads, self.d_model, self.dropout, self.score = n_heads, d_model, dropout, score
        if score == "additive":  # the per-head vector w of e = wᵀ tanh(W_q q + W_k k)
            self.additive_w = nn.Parameter(torch.empty(n_heads, d_model // n_heads))
            normal_init_(self.additive_w, (d_model // n_heads) ** -0.5)
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        nn.init.xavier_uniform_(self.in_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, -1, self.d_model // self.n_heads).transpose(1, 2)  # (B, H, T, Dh)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention projections: (B, T, D) -> 3 x (B, H, T, Dh)."""
        return tuple(self._heads(t) for t in self.in_proj(x).chunk(3, dim=-1))

    def project_q(self, x: Tensor) -> Tensor:
        D = self.d_model
        return self._heads(F.linear(x, self.in_proj.weight[:D], self.in_proj.bias[:D]))

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values: (B, S, D) -> 2 x (B, H, S, Dh)."""
        D = self.d_model
        kv = F.linear(memory, self.in_proj.weight[D:], self.in_proj.bias[D:])
        return tuple(self._heads(t) for t in kv.chunk(2, dim=-1))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               is_causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attention over projected heads, then W^O: -> (B, Tq, D), weights or None."""
        p = self.dropout if self.training else 0.0
        if self.score == "additive":
            out, weights = additive_attention(q, k, v, self.additive_w, mask, is_causal, p, need_weights)
        else:
            scale = 1.0 if self.score == "dot" else None  # None: 1/sqrt(d_k), the paper's
            out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal, p, need_weights, scale)
        B, _, Tq, _ = out.shape
        out = out.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, Tq, D)
        return self.out_proj(out), weights

    def forward(self, query: Tensor, key_value: Tensor | None = None, mask: Tensor | None = None,
                is_causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if key_value is None:
            q, k, v = self.project_qkv(query)
        else:
            q, (k, v) = self.project_q(query), self.project_kv(key_value)
        return self.attend(q, k, v, mask, is_causal, need_weights)


# -- what the models call: the fused kernel, or explicit matmuls -----------------------------------------
def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False,
    dropout: float = 0.0, need_weights: bool = False, scale: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """`attention` with dropout on the weights and a causal option: softmax(q kᵀ · scale) v, scale = 1/sqrt(d_k)
    by default (§3.2.1); scale = 1 is plain dot-product attention. q: (B, H, Tq, Dh), k/v: (B, H, Tk, Dh).
    -> (output (B, H, Tq, Dh), the weights (B, H, Tq, Tk) when `need_weights`, else None). Fully masked rows
    give zero output and weights."""
    if need_weights or _fused_is_slow(q):
        return _explicit(q, k, v, _with_causal(q, k, mask, is_causal), dropout, need_weights, scale)
    return _fused(q, k, v, mask, is_causal, dropout, scale), None


def _explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float, need_weights: bool,
              scale: float | None) -> tuple[Tensor, Tensor | None]:
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, weights = _attend((q * scale) @ k.transpose(-2, -1), v, mask, dropout)  # scores (B, H, Tq, Tk); scaled first: no fp16 overflow
    return out, (weights if need_weights else None)


def _fused(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float,
           scale: float | None) -> Tensor:
    """torch's fused kernel; a row without keys attends everywhere inside it (no NaN, even in gradients),
    and is then zeroed."""
    if is_causal and mask is None and q.shape[2] == k.shape[2]:  # plain causal self-attention: the kernel's own
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale)
    mask = _with_causal(q, k, mask, is_causal)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale)
    has_key = masks.rows_with_keys(mask)  # (..., Tq, 1)
    if bool(has_key.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.open_empty_rows(mask, has_key), dropout_p=dropout, scale=scale)
    return out * has_key


def _fused_is_slow(q: Tensor) -> bool:
    """Training in bf16/fp16 on a CPU: there torch's fused kernel takes 3-9x the time of the
    explicit matmuls forward and backward (2 cores, torch 2.13; in fp32 it is the faster one)."""
    return q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and q.requires_grad


def _with_causal(q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor | None:
    """The mask with the causal constraint folded in."""
    if not is_causal:
        return mask
    causal = masks.causal_mask(q.shape[2], k.shape[2] - q.shape[2], device=q.device)
    return causal if mask is None else mask & causal


def _attend(scores: Tensor, v: Tensor, mask: Tensor | None, dropout: float):
    """softmax over the allowed keys of `scores` (B, H, Tq, Tk), then the weighted values:
    -> (output (B, H, Tq, Dh), weights (B, H, Tq, Tk)). A row with no allowed key gets zeros."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
    if mask is not None:
        weights = weights.masked_fill(~masks.rows_with_keys(mask), 0.0)
    out = _dropout(weights, dropout, training=dropout > 0) @ v  # (B, H, Tq, Dh)
    return out, weights


# -- additive attention, the alternative §3.2.1 compares with --------------------------------------------
def additive_attention(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Tensor | None = None, is_causal: bool = False,
    dropout: float = 0.0, need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Additive attention (Bahdanau et al., 2014): e = wᵀ tanh(q + k) per head, over the already projected
    queries and keys (W_q q, W_k k). q: (B, H, Tq, Dh), k/v: (B, H, Tk, Dh), w: (H, Dh). Explicit:
    O(Tq·Tk·Dh) memory per head."""
    mask = _with_causal(q, k, mask, is_causal)
    hidden = torch.tanh(q[:, :, :, None, :] + k[:, :, None, :, :])  # (B, H, Tq, Tk, Dh)
    scores = (hidden * w[None, :, None, None, :]).sum(-1)  # (B, H, Tq, Tk)
    out, weights = _attend(scores, v, mask, dropout)
    return out, (weights if need_weights else None)
