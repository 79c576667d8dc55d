"""Encoder and decoder layers (§3.1): attention and feed-forward sub-layers, each wrapped
in a residual connection with dropout and layer normalisation.

Post-norm (the paper): x = LayerNorm(x + Dropout(Sublayer(x))).
Pre-norm (option):     x = x + Dropout(Sublayer(LayerNorm(x))), with a final norm per stack.
The layout follows `torch.nn.TransformerEncoderLayer`/`TransformerDecoderLayer`, which the
tests use as the reference.
"""

from __future__ import annotations

import functools
from types import MappingProxyType

import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.modules.attention import MultiHeadAttention
from aiayn.modules.cache import KVCache
from aiayn.modules.dropout import Dropout
from aiayn.config import TransformerConfig


ACTIVATION_FUNCTIONS = MappingProxyType({  # the names of `aiayn.config.ACTIVATIONS`
    "relu": F.relu,
    "gelu": F.gelu,  # exact, with erf (BERT, ViT)
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),  # GPT-2's gelu_new
    "silu": F.silu,  # x·sigmoid(x), Marian's swish
})


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3), or with another `activation` than ReLU
    (`aiayn.config.ACTIVATIONS`). (B, T, D) -> (B, T, D)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.activation = activation
        self.act = ACTIVATION_FUNCTIONS[activation]
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        for linear in (self.linear1, self.linear2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.act(self.linear1(x))))


class SublayerConnection(nn.Module):
    """Residual + dropout + LayerNorm around one sub-layer (§3.1, §5.4).

    Used in two halves so sub-layers may return extra outputs (attention weights):
        h = conn.input(x); y = sublayer(h); x = conn.output(x, y)
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.norm_first else x

    def output(self, x: Tensor, y: Tensor) -> Tensor:
        x = x + self.dropout(y)
        return x if self.norm_first else self.norm(x)


def _connection(cfg: TransformerConfig) -> SublayerConnection:
    return SublayerConnection(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)


class EncoderLayer(nn.Module):
    """Self-attention then FFN. x: (B, S, D); mask: (B, 1, 1, S), True = real source token."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.attention_score)
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.sa_conn, self.ff_conn = _connection(cfg), _connection(cfg)

    def forward(self, x: Tensor, mask: Tensor | None, need_weights: bool = False):
        """Returns (x (B, S, D), self-attention weights (B, H, S, S) or None)."""
        y, weights = self.self_attn(self.sa_conn.input(x), mask=mask, need_weights=need_weights)
        x = self.sa_conn.output(x, y)
        x = self.ff_conn.output(x, self.ff(self.ff_conn.input(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then FFN (§3.1).

    Always runs against a `KVCache`: teacher forcing is the special case of an empty
    cache and a whole target prefix, so training and incremental decoding share one path.
    """

    def __init__(self, cfg: TransformerConfig, index: int, cross_attention: bool = True):
        super().__init__()
        self.index = index
        attention = lambda: MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.attention_score)  # noqa: E731
        # registration order = parameter order, which optimizer states in checkpoints rely on
        self.self_attn = attention()
        self.cross_attn = attention() if cross_attention else None  # None: the decoder-only (GPT) layer
        self.ff = PositionwiseFeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.sa_conn = _connection(cfg)
        self.ca_conn = _connection(cfg) if cross_attention else None
        self.ff_conn = _connection(cfg)

    def forward(self, x: Tensor, cache: KVCache, cross_mask: Tensor | None, need_weights: bool = False,
                index: int | None = None):
        """x: (B, T, D) new target positions; cross_mask: (n, 1, 1, S) per source (`KVCache.group`
        rows each), or None when nothing is padded; index: the cache slot, when not the layer's own
        (a Universal Transformer applies one layer at several depths, `aiayn.modules.universal`).

        Returns (x, self weights (B, H, T, P+T) or None, cross weights (B, H, T, S) or None).
        """
        index = self.index if index is None else index
        x, self_w = self._sa_block(x, cache, index, need_weights)
        cross_w = None
        if self.cross_attn is not None:
            x, cross_w = self._mha_block(x, cache, index, cross_mask, need_weights)
        x = self.ff_conn.output(x, self.ff(self.ff_conn.input(x)))
        return x, self_w, cross_w

    def _sa_block(self, x: Tensor, cache: KVCache, index: int, need_weights: bool):
        q, k, v = self.self_attn.project_qkv(self.sa_conn.input(x))
        k, v = cache.append(index, k, v)  # (B, H, P+T, Dh)
        causal = q.shape[2] > 1  # a single new query may see every cached key
        y, w = self.self_attn.attend(q, k, v, is_causal=causal, need_weights=need_weights)
        return self.sa_conn.output(x, y), w

    def _mha_block(self, x: Tensor, cache: KVCache, index: int, cross_mask: Tensor | None, need_weights: bool):
        q = cache.grouped(self.cross_attn.project_q(self.ca_conn.input(x)))  # (n, H, group·T, Dh): one per source
        k, v = cache.cross_k[index], cache.cross_v[index]
        y, w = self.cross_attn.attend(q, k, v, mask=cross_mask, need_weights=need_weights)  # (n, group·T, D)
        y = y.reshape(x.shape)  # (n, group·T, D) -> (B, T, D): each source's rows back apart
        return self.ca_conn.output(x, y), (None if w is None else cache.ungrouped(w))
