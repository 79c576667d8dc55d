"""`FastDecoder`: the Transformer's decoding interface with a faster one-token step, for inference.

At small batch sizes a decoding step is a few dozen tiny matrix-vector products, and the
time goes to per-op overhead and to the weight layout: a (1, D) x (D, out) product with
the weight stored (D, out) contiguous runs faster on CPU BLAS than `F.linear`'s transposed
(out, D) weight. `FastDecoder` therefore keeps transposed, contiguous copies of the decoder
weights and runs the step as plain `torch.addmm` / `layer_norm` /
attention calls on 2-D (N, D) activations, without module calls,
dropout no-ops, mask building or host syncs (the cross-attention masks are built once per
source, in the `KVCache`). The math is that of `aiayn.modules.layers.DecoderLayer` (post- or
pre-norm, the FFN's activation, the final logits bias); it reads and extends the same `KVCache`, and the tests check its
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
one `FastDecoder` serves concurrent calls.

It also decodes in lower precision (`precision`, see the class doc): bf16 where the CPU or GPU
multiplies bf16 natively, and int8 weights with dynamically quantized activations on the CPU
(`aiayn.modules.quantized`). Built from a model whose decoder layers are not
exactly `DecoderLayer` with `PositionwiseFeedForward`, it refuses (ValueError),
since it would compute other math.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.modules import masks
from aiayn.modules.cache import KVCache
from aiayn.modules.layers import ACTIVATION_FUNCTIONS, DecoderLayer, PositionwiseFeedForward
from aiayn.modules.quantized import Int8Linear, quantize_linears_
from aiayn.runtime import no_cudnn_attention

PRECISIONS = ("fp32", "bf16", "int8")


Linear = Callable[[Tensor], Tensor]  # (N, in) -> (N, out)


@dataclass
class _Layer:
    sa_norm: tuple[Tensor, Tensor]
    qkv: Linear  # (N, D) -> (N, 3D): the self-attention's in_proj
    sa_out: Linear
    ca_norm: tuple[Tensor, Tensor]
    q: Linear  # the cross-attention's query projection (its keys/values are in the cache)
    ca_out: Linear
    ff_norm: tuple[Tensor, Tensor]
    ff1: Linear  # (N, D) -> (N, F)
    ff2: Linear  # (N, F) -> (N, D)


def _linear(weight: Tensor, bias: Tensor, precision: str) -> Linear:
    """y = x W^T + b as one call; y may be a transposed view (callers reshape, never view).
    fp32: one row as x (D, out) with W stored transposed, the layout `addmm` reads fastest for a
    vector; more rows as (W x^T)^T, where the BLAS packs the small x^T rather than the whole weight
    at every call (`benchmarks/beam_profile.py` before and after, docs/history/results-2026-11.md: a beam-4 step
    3.14 -> 2.73 ms at batch 1). bf16 casts x to bf16 and returns bf16. int8: `Int8Linear`."""
    if precision == "int8":
        return Int8Linear(weight, bias).forward
    if precision == "bf16":
        wt, b = weight.t().contiguous().bfloat16(), bias.bfloat16()  # (in, out), (out,)
        return lambda x: torch.addmm(b, x.to(torch.bfloat16), wt)
    wt, w, b_col = weight.t().contiguous(), weight.contiguous(), bias[:, None].contiguous()  # (in, out), (out, in)

    def fp32(x: Tensor) -> Tensor:
        if x.shape[0] == 1 or x.device.type != "cpu":
            return torch.addmm(bias, x, wt)
        return torch.addmm(b_col, w, x.t()).t()  # (out, N) -> (N, out) view
    return fp32


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) v, mask True = may attend: q (n, H, Tq, Dh), k and v (n, H, Tk, Dh).
    In fp32, from 32 (source, head) pairs on, as two batched matmuls: torch's fused CPU kernel (flash
    attention, built for long queries) spent 3x as long on a step's few queries per source
    (`benchmarks/beam_profile.py --top`); below that, the fused kernel's one call is faster. In bf16
    always the fused kernel, which scores in fp32: bf16 scores from a matmul would make a sentence's
    output depend on how many others share its batch (the switch at 32). The padding of a batch's longer
    sources still moves bf16 results at bf16's rounding (about 1e-2: now and then a near-tie flips a
    token), as in any half-precision decoder. fp32 results move with the batch at fp32's rounding only
    (this switch and the matmul layouts differ with the row count: about 1e-6 in a logit)."""
    n, H, Tq, Dh = q.shape
    if n * H < 32 or q.device.type != "cpu" or q.dtype != torch.float32:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    Tk = k.shape[2]
    k3, v3 = k.reshape(n * H, Tk, Dh), v.reshape(n * H, Tk, Dh)  # views, also of the cache's buffer slices
    scores = torch.bmm(q.reshape(n * H, Tq, Dh), k3.transpose(1, 2)).mul_(Dh ** -0.5)  # (nH, Tq, Tk)
    if mask is not None:
        scores = scores.view(n, H, Tq, Tk).masked_fill(~mask, float("-inf")).view(n * H, Tq, Tk)
    probs = torch.softmax(scores, -1, dtype=torch.float32).to(v.dtype)
    return torch.bmm(probs, v3).view(n, H, Tq, Dh)


def _layer(layer, precision: str) -> _Layer:
    """The step's view of one layer of the frozen snapshot: its norms as they are, its linear
    layers as `_linear` calls."""
    D = layer.self_attn.d_model
    sa, ca = layer.self_attn, layer.cross_attn
    norm = lambda n: (n.weight, n.bias)  # noqa: E731
    lin = lambda w, b: _linear(w, b, precision)  # noqa: E731
    return _Layer(
        norm(layer.sa_conn.norm), lin(sa.in_proj.weight, sa.in_proj.bias), lin(sa.out_proj.weight, sa.out_proj.bias),
        norm(layer.ca_conn.norm), lin(ca.in_proj.weight[:D], ca.in_proj.bias[:D]),
        lin(ca.out_proj.weight, ca.out_proj.bias),
        norm(layer.ff_conn.norm), lin(layer.ff.linear1.weight, layer.ff.linear1.bias),
        lin(layer.ff.linear2.weight, layer.ff.linear2.bias),
    )


class _Output:
    """The pre-softmax projection (N, D) -> logits (N, V), no bias. In fp32, few rows run as
    (W x^T)^T: with x^T the small operand, the BLAS packs x instead of the whole (D, V) weight at
    every call (the same layout as `_linear`'s; kept apart because the output is read by rows, and
    at 128 rows the plain product measured faster than the transposed one plus its copy)."""

    FEW_ROWS = 64

    def __init__(self, weight: Tensor, bias: Tensor | None, precision: str):  # weight (V, D), bias (V,) or None
        self.precision, self.bias = precision, bias
        if precision == "int8":
            self.int8 = Int8Linear(weight, bias).forward
        dtype = torch.bfloat16 if precision == "bf16" else weight.dtype
        self.w = weight.contiguous().to(dtype)  # (V, D)
        self.wt = weight.t().contiguous().to(dtype)  # (D, V)

    def __call__(self, x: Tensor) -> Tensor:
        if self.precision == "int8":
            return self.int8(x)
        x = x.to(self.wt.dtype)
        if 1 < x.shape[0] <= self.FEW_ROWS and x.device.type == "cpu":
            logits = torch.mm(self.w, x.t()).t().contiguous()  # (V, N) -> (N, V)
        else:
            logits = x @ self.wt
        return logits if self.bias is None else logits.add_(self.bias)  # the final logits bias (Marian)


def _snapshot(model, precision: str):
    """A frozen copy of `model`: copies of all its parameters and buffers, none requiring grad;
    with int8, its encoder's linear layers quantized (`quantize_linears_`).
    (`deepcopy`, not a rebuild from the config: building would draw from the global RNG.)"""
    snapshot = copy.deepcopy(model).requires_grad_(False)
    if precision == "int8":
        quantize_linears_(snapshot.encoder)
    return snapshot


class FastDecoder:
    """The decoding interface of `model` (a `Transformer` in eval mode) with a faster `step`:
    `step(tokens (N,), cache) -> logits (N, V)` equals `model.step(tokens, cache)` in fp32.

    Its step also takes rows at different positions (`KVCache.start`, continuous batching).

    It decodes with the weights `model` had when it was built (a snapshot, see the module doc):
    after the weights change it keeps giving the old model's outputs until it is rebuilt
    (`model.fast_decoder()`, `Translator.refresh()`).

    `precision`: "fp32" (the model's own math); "bf16": the linear layers multiply in bf16 (the
    residual stream, norms and softmax stay fp32; the encoder runs under bf16 autocast, and the
    keys/values are cached in bf16); "int8": the linear layers of the encoder and decoder and the
    output projection multiply int8 weights by dynamically quantized activations (`Int8Linear`);
    the cross-attention key/value projections and copy attention stay fp32."""

    ragged_steps = True

    def __init__(self, model, precision: str = "fp32"):
        _check_supported(model)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if precision == "int8" and next(model.parameters()).device.type != "cpu":
            raise ValueError("int8 decoding runs on the CPU (FBGEMM); use bf16 on a GPU")
        cfg = model.config
        self.precision = precision
        self.model = model = _snapshot(model, precision)  # everything below reads the snapshot, never the live model
        self._device = next(model.parameters()).device
        self.decoder = model.decoder
        self.n_heads, self.d_model = cfg.n_heads, cfg.d_model
        self.norm_first, self.eps = cfg.norm_first, cfg.layer_norm_eps
        self.layers = [_layer(layer, precision) for layer in model.decoder.layers]
        final = model.decoder.final_norm
        self.final_norm = None if final is None else (final.weight, final.bias)
        self.act = ACTIVATION_FUNCTIONS[cfg.activation]  # the FFN's: ReLU in the paper
        out = model.decoder.embed.weight if model.output_proj is None else model.output_proj.weight
        self.output = _Output(out, model.logits_bias, precision)  # (N, D) -> (N, V)

    # -- the decoding interface: everything but `step` is the model's own ------------------
    @contextlib.contextmanager
    def _autocast(self):
        """bf16: the model's own passes (the encoder, attention pictures) under bf16 autocast, with `_kernels`."""
        if self.precision != "bf16":
            yield
            return
        with torch.autocast(self._device.type, dtype=torch.bfloat16), self._kernels():
            yield

    def _kernels(self):
        """bf16 (on CUDA): attention without cuDNN's kernel, which plans every new shape, and every
        decoding step brings one (`runtime.no_cudnn_attention`)."""
        return no_cudnn_attention(self._device) if self.precision == "bf16" else contextlib.nullcontext()

    def start(self, src: Tensor, capacity: int = 64) -> KVCache:
        with self._autocast():
            cache = self.model.start(src, capacity)
        cache.cross_k = [k.contiguous() for k in cache.cross_k]  # (n, H, S, Dh): read as (n·H, S, Dh) views
        cache.cross_v = [v.contiguous() for v in cache.cross_v]
        return cache

    @property
    def max_output_length(self) -> int | None:
        return self.model.max_output_length

    @property
    def max_input_length(self) -> int:
        return self.model.max_input_length

    def attention(self, src: Tensor, tgt_in: Tensor):
        with self._autocast():
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
        """tokens (N,), each row's last token -> logits (N, V); appends one position to `cache`."""
        with self._kernels():
            return self._step(tokens, cache)

    def _step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        N, H, D = tokens.shape[0], self.n_heads, self.d_model
        dec = self.decoder
        x = dec.embed(tokens) + self._positions(cache)  # (N, D) fp32: the residual stream
        self_mask = cache.self_mask()  # (N, 1, 1, P+1) or None: rows that joined later see only their own
        cross_mask, has_key = cache.cross_mask, cache.has_source  # (n, 1, 1, S), (n, 1, 1, 1) or None
        if has_key is not None:
            cross_mask = masks.open_empty_rows(cross_mask, has_key)  # a source with no token: zeroed after
        for i, p in enumerate(self.layers):
            h = self._norm(x, p.sa_norm) if self.norm_first else x
            qkv = p.qkv(h).reshape(N, 3, H, 1, D // H)  # (N, 3, H, 1, Dh)
            k, v = cache.append(i, qkv[:, 1], qkv[:, 2])  # (N, H, P+1, Dh)
            y = _attend(qkv[:, 0], k, v, self_mask).reshape(N, D)  # causal: one query
            x = x + p.sa_out(y)
            x = x if self.norm_first else self._norm(x, p.sa_norm)

            h = self._norm(x, p.ca_norm) if self.norm_first else x
            q = cache.grouped(p.q(h).reshape(N, H, 1, D // H))  # (n, H, group, Dh)
            y = _attend(q, cache.cross_k[i], cache.cross_v[i], cross_mask)
            if has_key is not None:
                y = y * has_key  # a source with no token attends to nothing: zeros
            x = x + p.ca_out(cache.ungrouped(y).reshape(N, D))
            x = x if self.norm_first else self._norm(x, p.ca_norm)

            h = self._norm(x, p.ff_norm) if self.norm_first else x
            x = x + p.ff2(self.act(p.ff1(h)))
            x = x if self.norm_first else self._norm(x, p.ff_norm)
        cache.advance(1)
        if self.final_norm is not None:
            x = self._norm(x, self.final_norm)
        logits = self.output(x)  # (N, V)
        if self.model.copy is None:
            return logits
        return self.model.copy(x[:, None], logits.float()[:, None], cache)[:, 0]


def _check_supported(model) -> None:
    if model.training:
        raise ValueError("FastDecoder is for inference: call model.eval() first")
    if model.config.attention_score != "scaled_dot":
        raise ValueError(f"FastDecoder computes scaled dot-product attention; this model uses "
                         f"{model.config.attention_score!r}: decode with the model itself")
    if model.config.universal:
        raise ValueError("FastDecoder computes a stack of distinct layers; a Universal Transformer applies one "
                         "layer again and again: decode with the model itself")
    for layer in model.decoder.layers:
        if type(layer) is not DecoderLayer or type(layer.ff) is not PositionwiseFeedForward:
            raise ValueError(f"FastDecoder computes DecoderLayer with PositionwiseFeedForward; got {type(layer).__name__} "
                             f"with {type(layer.ff).__name__}: decode with the model itself")
