"""`FastDecoder`: the Transformer's decoding interface with a faster one-token step, for inference.

At small batch sizes a decoding step is a few dozen tiny matrix-vector products, and the
time goes to per-op overhead and to the weight layout: a (1, D) x (D, out) product with
the weight stored (D, out) contiguous runs faster on CPU BLAS than `F.linear`'s transposed
(out, D) weight. `FastDecoder` therefore keeps transposed, contiguous copies of the decoder
weights and runs the step as plain `torch.addmm` / `layer_norm` /
`scaled_dot_product_attention` calls on 2-D (N, D) activations, without module calls,
dropout no-ops, mask building or host syncs (the cross-attention masks are built once per
source, in the `KVCache`). The math is that of `aiayn.modules.layers.DecoderLayer` (post- or
pre-norm, ReLU FFN); it reads and extends the same `KVCache`, and the tests check its
logits against `Transformer.step` at every step.

It is an explicit object, not a hidden memo: `Transformer.fast_decoder()` builds one (a
`Translator` builds one when it is made, and `Translator.refresh()` rebuilds it after the
weights change). It is a snapshot: at build time it copies every tensor it will read (a
frozen copy of the whole model, for `start`, `attention`, embeddings, positions, norms,
biases and copy attention, plus transposed copies of the decoder's weight matrices), so a
later weight update, in place or not, never reaches it, and it never mixes old and new
weights: rebuilding it (`Translator.refresh()`) is the only way to see new weights. The
copies are made once, at build time (they cost one more copy of the model's weights, plus
the transposed matrices); a step copies nothing. All per-call state is in the `KVCache`, so
one `FastDecoder` serves concurrent calls. Built from a model whose decoder layers are not
exactly `DecoderLayer` with the ReLU `PositionwiseFeedForward`, it refuses (ValueError),
since it would compute other math.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.modules.cache import KVCache
from aiayn.modules.layers import DecoderLayer, PositionwiseFeedForward


@dataclass
class _Layer:
    sa_norm: tuple[Tensor, Tensor]
    qkv_w: Tensor  # (D, 3D): x @ qkv_w = in_proj(x) - bias
    qkv_b: Tensor  # (3D,)
    sa_out_w: Tensor  # (D, D)
    sa_out_b: Tensor
    ca_norm: tuple[Tensor, Tensor]
    q_w: Tensor  # (D, D)
    q_b: Tensor
    ca_out_w: Tensor
    ca_out_b: Tensor
    ff_norm: tuple[Tensor, Tensor]
    w1: Tensor  # (D, F)
    b1: Tensor
    w2: Tensor  # (F, D)
    b2: Tensor


def _t(w: Tensor) -> Tensor:
    return w.t().contiguous()  # (out, D) -> (D, out), the layout `addmm` reads fastest


def _layer(layer) -> _Layer:
    """The step's view of one layer of the frozen snapshot: its norms and biases as they are,
    its weight matrices transposed."""
    D = layer.self_attn.d_model
    sa, ca = layer.self_attn, layer.cross_attn
    norm = lambda n: (n.weight, n.bias)  # noqa: E731
    return _Layer(
        norm(layer.sa_conn.norm), _t(sa.in_proj.weight), sa.in_proj.bias,
        _t(sa.out_proj.weight), sa.out_proj.bias,
        norm(layer.ca_conn.norm), _t(ca.in_proj.weight[:D]), ca.in_proj.bias[:D],
        _t(ca.out_proj.weight), ca.out_proj.bias,
        norm(layer.ff_conn.norm), _t(layer.ff.linear1.weight), layer.ff.linear1.bias,
        _t(layer.ff.linear2.weight), layer.ff.linear2.bias,
    )


def _snapshot(model):
    """A frozen copy of `model`: copies of all its parameters and buffers, none requiring grad.
    (`deepcopy`, not a rebuild from the config: building would draw from the global RNG.)"""
    return copy.deepcopy(model).requires_grad_(False)


class FastDecoder:
    """The decoding interface of `model` (a `Transformer` in eval mode) with a faster `step`:
    `step(tokens (N,), cache) -> logits (N, V)` equals `model.step(tokens, cache)`.

    Its step also takes rows at different positions (`KVCache.start`, continuous batching).

    It decodes with the weights `model` had when it was built (a snapshot, see the module doc):
    after the weights change it keeps giving the old model's outputs until it is rebuilt
    (`model.fast_decoder()`, `Translator.refresh()`)."""

    ragged_steps = True

    def __init__(self, model):
        _check_supported(model)
        cfg = model.config
        self.model = model = _snapshot(model)  # everything below reads the snapshot, never the live model
        self.decoder = model.decoder
        self.n_heads, self.d_model = cfg.n_heads, cfg.d_model
        self.norm_first, self.eps = cfg.norm_first, cfg.layer_norm_eps
        self.layers = [_layer(layer) for layer in model.decoder.layers]
        final = model.decoder.final_norm
        self.final_norm = None if final is None else (final.weight, final.bias)
        out = model.decoder.embed.weight if model.output_proj is None else model.output_proj.weight
        self.out_w = _t(out)  # (D, V)

    # -- the decoding interface: everything but `step` is the model's own ------------------
    def start(self, src: Tensor, capacity: int = 64) -> KVCache:
        return self.model.start(src, capacity)

    @property
    def max_output_length(self) -> int | None:
        return self.model.max_output_length

    @property
    def max_input_length(self) -> int:
        return self.model.max_input_length

    def attention(self, src: Tensor, tgt_in: Tensor):
        return self.model.attention(src, tgt_in)

    def _positions(self, cache: KVCache) -> Tensor:
        """(1, D) for the usual cache, (N, D) when rows are at different positions (`KVCache.start`)."""
        rows = cache.positions()
        if rows is None:
            return self.decoder.positions(1, start=cache.length)
        return self.decoder.positions(cache.length + 1)[rows]

    def _norm(self, x: Tensor, wb: tuple[Tensor, Tensor]) -> Tensor:
        return F.layer_norm(x, (self.d_model,), wb[0], wb[1], self.eps)

    @torch.inference_mode()
    def step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        N, H, D = tokens.shape[0], self.n_heads, self.d_model
        dec = self.decoder
        x = dec.embed(tokens) + self._positions(cache)  # (N, D)
        self_mask = cache.self_mask()  # (N, 1, 1, P+1) or None: rows that joined later see only their own
        cross_mask, has_key = cache.cross_mask, cache.has_source  # (n, 1, 1, S), (n, 1, 1, 1) or None
        if has_key is not None:
            cross_mask = cross_mask | ~has_key  # a source with no token is attended everywhere, then zeroed
        for i, p in enumerate(self.layers):
            h = self._norm(x, p.sa_norm) if self.norm_first else x
            qkv = torch.addmm(p.qkv_b, h, p.qkv_w).view(N, 3, H, 1, D // H)  # (N, 3, H, 1, Dh)
            k, v = cache.append(i, qkv[:, 1], qkv[:, 2])  # (N, H, P+1, Dh)
            y = F.scaled_dot_product_attention(qkv[:, 0], k, v, attn_mask=self_mask).view(N, D)  # causal: one query
            x = x + torch.addmm(p.sa_out_b, y, p.sa_out_w)
            x = x if self.norm_first else self._norm(x, p.sa_norm)

            h = self._norm(x, p.ca_norm) if self.norm_first else x
            q = cache.grouped(torch.addmm(p.q_b, h, p.q_w).view(N, H, 1, D // H))  # (n, H, group, Dh)
            y = F.scaled_dot_product_attention(q, cache.cross_k[i], cache.cross_v[i], attn_mask=cross_mask)
            if has_key is not None:
                y = y * has_key  # a source with no token attends to nothing: zeros
            x = x + torch.addmm(p.ca_out_b, cache.ungrouped(y).reshape(N, D), p.ca_out_w)
            x = x if self.norm_first else self._norm(x, p.ca_norm)

            h = self._norm(x, p.ff_norm) if self.norm_first else x
            x = x + torch.addmm(p.b2, torch.relu(torch.addmm(p.b1, h, p.w1)), p.w2)
            x = x if self.norm_first else self._norm(x, p.ff_norm)
        cache.advance(1)
        if self.final_norm is not None:
            x = self._norm(x, self.final_norm)
        logits = x @ self.out_w  # (N, V)
        return logits if self.model.copy is None else self.model.copy(x[:, None], logits[:, None], cache)[:, 0]


def _check_supported(model) -> None:
    if model.training:
        raise ValueError("FastDecoder is for inference: call model.eval() first")
    if model.config.attention_score != "scaled_dot":
        raise ValueError(f"FastDecoder computes scaled dot-product attention; this model uses "
                         f"{model.config.attention_score!r}: decode with the model itself")
    for layer in model.decoder.layers:
        if type(layer) is not DecoderLayer or type(layer.ff) is not PositionwiseFeedForward:
            raise ValueError(f"FastDecoder computes DecoderLayer with a ReLU FFN; got {type(layer).__name__} "
                             f"with {type(layer.ff).__name__}: decode with the model itself")
