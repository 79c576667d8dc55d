"""An inference-only fast path for one decoder step: `Transformer.decode` for T = 1.

At small batch sizes a decoding step is a few dozen tiny matrix-vector products, and the
time goes to per-op overhead and to the weight layout: a (1, D) x (D, out) product with
the weight stored (D, out) contiguous runs ~1.5x faster on CPU BLAS than `F.linear`'s
transposed (out, D) weight. `IncrementalDecoder` therefore keeps transposed, contiguous
copies of the decoder weights and runs the step as plain `torch.addmm` / `layer_norm` /
`scaled_dot_product_attention` calls on 2-D (N, D) activations, without module calls,
dropout no-ops, per-step mask building or host syncs. The math is exactly that of
`aiayn.layers.DecoderLayer` (post- or pre-norm) and it reads and extends the same
`KVCache`, so it can be mixed freely with `model.decode`; the tests check the logits
against `model.decode` at every step.

`incremental_decoder(model)` returns one per model, rebuilt when any decoder weight has
been modified in place since (e.g. by an optimizer step), so it is safe to call from a
training loop; it returns None for models it cannot handle (anything but an eval-mode
`Transformer`), and callers then use `model.decode`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn import masks
from aiayn.cache import KVCache

_BUILT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


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
    return w.detach().t().contiguous()


def _layer(layer) -> _Layer:
    D = layer.self_attn.d_model
    sa, ca = layer.self_attn, layer.cross_attn
    norm = lambda n: (n.weight.detach(), n.bias.detach())  # noqa: E731
    return _Layer(
        norm(layer.sa_conn.norm), _t(sa.in_proj.weight), sa.in_proj.bias.detach(),
        _t(sa.out_proj.weight), sa.out_proj.bias.detach(),
        norm(layer.ca_conn.norm), _t(ca.in_proj.weight[:D]), ca.in_proj.bias[:D].detach(),
        _t(ca.out_proj.weight), ca.out_proj.bias.detach(),
        norm(layer.ff_conn.norm), _t(layer.ff.linear1.weight), layer.ff.linear1.bias.detach(),
        _t(layer.ff.linear2.weight), layer.ff.linear2.bias.detach(),
    )


class IncrementalDecoder:
    """`step(tokens (N,), cache) -> logits (N, V)`, equal to `model.decode(tokens[:, None], cache).logits[:, 0]`."""

    def __init__(self, model):
        cfg = model.config
        self.decoder = model.decoder
        self.n_heads, self.d_model = cfg.n_heads, cfg.d_model
        self.norm_first, self.eps = cfg.norm_first, cfg.layer_norm_eps
        self.layers = [_layer(layer) for layer in model.decoder.layers]
        final = model.decoder.final_norm
        self.final_norm = None if final is None else (final.weight.detach(), final.bias.detach())
        out = model.decoder.embed.weight if model.output_proj is None else model.output_proj.weight
        self.out_w = _t(out)  # (D, V)
        self._mask_key: Tensor | None = None
        self._mask: tuple[Tensor | None, Tensor | None] = (None, None)

    def _norm(self, x: Tensor, wb: tuple[Tensor, Tensor]) -> Tensor:
        return F.layer_norm(x, (self.d_model,), wb[0], wb[1], self.eps)

    def _cross_mask(self, src_mask: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """(attention mask (N, 1, 1, S) or None, rows-with-keys (N, 1, 1, 1) or None), memoised per src_mask."""
        if src_mask is not self._mask_key:
            self._mask_key = src_mask
            if bool(src_mask.all()):
                self._mask = (None, None)
            else:
                mask = masks.key_mask(src_mask)  # (N, 1, 1, S)
                has_key = masks.rows_with_keys(mask)  # (N, 1, 1, 1)
                self._mask = (mask, None) if bool(has_key.all()) else (mask | ~has_key, has_key)
        return self._mask

    @torch.inference_mode()
    def step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        N, H, D = tokens.shape[0], self.n_heads, self.d_model
        dec = self.decoder
        x = dec.embed(tokens) + dec.positions(1, start=cache.length)  # (N, D)
        cross_mask, has_key = self._cross_mask(cache.src_mask)
        for i, p in enumerate(self.layers):
            h = self._norm(x, p.sa_norm) if self.norm_first else x
            qkv = torch.addmm(p.qkv_b, h, p.qkv_w).view(N, 3, H, 1, D // H)  # (N, 3, H, 1, Dh)
            k, v = cache.append(i, qkv[:, 1], qkv[:, 2])  # (N, H, P+1, Dh)
            y = F.scaled_dot_product_attention(qkv[:, 0], k, v).view(N, D)  # one query sees all keys
            x = x + torch.addmm(p.sa_out_b, y, p.sa_out_w)
            x = x if self.norm_first else self._norm(x, p.sa_norm)

            h = self._norm(x, p.ca_norm) if self.norm_first else x
            q = torch.addmm(p.q_b, h, p.q_w).view(N, H, 1, D // H)  # (N, H, 1, Dh)
            y = F.scaled_dot_product_attention(q, cache.cross_k[i], cache.cross_v[i], attn_mask=cross_mask)
            if has_key is not None:
                y = y * has_key  # a source with no token attends to nothing: zeros
            x = x + torch.addmm(p.ca_out_b, y.view(N, D), p.ca_out_w)
            x = x if self.norm_first else self._norm(x, p.ca_norm)

            h = self._norm(x, p.ff_norm) if self.norm_first else x
            x = x + torch.addmm(p.b2, torch.relu(torch.addmm(p.b1, h, p.w1)), p.w2)
            x = x if self.norm_first else self._norm(x, p.ff_norm)
        cache.advance(1)
        if self.final_norm is not None:
            x = self._norm(x, self.final_norm)
        return x @ self.out_w  # (N, V)


def _signature(model) -> tuple | None:
    """Identity and in-place-modification counters of every decoder weight; None if untrackable."""
    params = list(model.decoder.parameters())
    if model.output_proj is not None:
        params.append(model.output_proj.weight)
    if any(p.is_inference() for p in params):
        return None  # created under inference_mode: no version counters
    return tuple((p.data_ptr(), p._version) for p in params)


def incremental_decoder(model) -> IncrementalDecoder | None:
    """The fast step for `model`, or None when it does not apply (not a Transformer, training mode)."""
    from aiayn.model import Transformer

    if not isinstance(model, Transformer) or model.training:
        return None
    sig = _signature(model)
    if sig is None:
        return IncrementalDecoder(model)  # cannot tell whether weights change: never reuse
    built = _BUILT.get(model)
    if built is None or built[0] != sig:
        built = (sig, IncrementalDecoder(model))
        _BUILT[model] = built
    return built[1]


def decode_step(model, fast: IncrementalDecoder | None, tokens: Tensor, cache: KVCache) -> Tensor:
    """Logits (N, V) for the next token of every row; tokens: (N,) the last token of each row."""
    if fast is not None:
        return fast.step(tokens, cache)
    return model.decode(tokens[:, None], cache).logits[:, -1]
