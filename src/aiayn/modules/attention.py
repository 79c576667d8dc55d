"""Scaled dot-product and multi-head attention (§3.2).

Masks are boolean with True = may attend (see `aiayn.modules.masks`), broadcastable to
(B, H, Tq, Tk). A query row with no key to attend yields zeros, never NaN.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.modules import masks


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False,
    dropout: float = 0.0, need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(q kᵀ / sqrt(d_k)) v (§3.2.1). q: (B, H, Tq, Dh), k/v: (B, H, Tk, Dh).

    Uses the fused kernel unless `need_weights`, in which case the weights (B, H, Tq, Tk)
    are computed explicitly and returned. Fully masked rows give zero output and weights.
    """
    if is_causal:
        if mask is None and not need_weights and q.shape[2] == k.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout), None
        causal = masks.causal_mask(q.shape[2], k.shape[2] - q.shape[2], device=q.device)
        mask = causal if mask is None else mask & causal
    if need_weights:
        return _explicit_attention(q, k, v, mask, dropout)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout), None
    has_key = masks.rows_with_keys(mask)  # (..., Tq, 1)
    if bool(has_key.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
    # Let empty rows attend everywhere inside the kernel (no NaN, even in gradients), then zero them.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, dropout_p=dropout)
    return out * has_key, None


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if mask is not None:
        weights = weights.masked_fill(~masks.rows_with_keys(mask), 0.0)
    out = F.dropout(weights, p=dropout, training=dropout > 0) @ v  # (B, H, Tq, Dh)
    return out, weights


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

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads, self.d_model, self.dropout = n_heads, d_model, dropout
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
        out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal, p, need_weights)
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
