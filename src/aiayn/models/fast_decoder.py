"""`FastDecoder`: the Transformer's decoding interface with a faster one-token step, for inference.

At small batch sizes a decoding step is a few dozen small matrix products, and the time goes to
per-op overhead and to the weight layout. `FastDecoder` runs the step as plain `addmm` /
`layer_norm` / attention calls on 2-D (N, D) activations, without module calls, dropout no-ops,
mask building or host syncs (the cross-attention masks are built once per source, in the
`KVCache`), each product in the layout CPU BLAS runs fastest for its row count (`_affine`). The math
is that of `aiayn.modules.layers.DecoderLayer` (post- or pre-norm, the FFN's activation, the final
logits bias); it reads and extends the same `KVCache`, and the tests check its logits against
`Transformer.step` at every step.

Memory: it copies no weight it can read as it is. In fp32 it reads the model's own tensors; in bf16
it holds bf16 copies of the decoder's matrices and the output projection (the rest is the model's);
in int8 it holds one int8 copy of every matrix (the encoder's, the decoder's, the embeddings and the
output projection; a tied output projection two, `modules.quantized`: about 0.4 of the model's fp32
size at opus-mt's) and keeps no reference to the model, so
the fp32 weights can be freed (a `Translator` in int8 lets them go). Weights changed after it was
built (in place, as an optimizer does, or replaced) are refused at the next `start`: rebuild it
(`model.fast_decoder()`, `Translator.refresh()`); it never mixes old and new weights. All per-call
state is in the `KVCache`, so one `FastDecoder` serves concurrent calls.

It also decodes in lower precision (`precision`, see the class doc): bf16 where the CPU or GPU
multiplies bf16 natively, and int8 weights with dynamically quantized activations on the CPU
(`aiayn.modules.quantized`). Built from a model whose decoder layers are not
exactly `DecoderLayer` with `PositionwiseFeedForward`, it refuses (ValueError),
since it would compute other math.
"""
from __future__ import annotations

import contextlib
import copy
import weakref
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import PAD_ID
from aiayn.modules import masks
from aiayn.modules.cache import KVCache
from aiayn.modules.layers import ACTIVATION_FUNCTIONS, DecoderLayer, PositionwiseFeedForward
from aiayn.modules.quantized import Int8Embeddings, Int8Linear, Int8Rows
from aiayn.runtime import flush_denormals, no_cudnn_attention, page_out, release_freed_memory

PRECISIONS = ("fp32", "bf16", "int8")
MANY_ROWS = 16  # from this many rows on, a product runs as (W xᵀ)ᵀ on the CPU (`_affine`)


Linear = Callable[[Tensor], Tensor]  # (N, in) -> (N, out)


@dataclass
class _Layer:
    sa_norm: tuple[Tensor, Tensor]
    qkv: Linear  # (N, D) -> (N, 3D): the self-attention's in_proj
    sa_out: Linear
    ca_norm: tuple[Tensor, Tensor]
    q: Linear  # the cross-attention's query projection
    kv: Linear  # its key/value projection, run once per source (`start`)
    ca_out: Linear
    ff_norm: tuple[Tensor, Tensor]
    ff1: Linear  # (N, D) -> (N, F)
    ff2: Linear  # (N, F) -> (N, D)


def _affine(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """x (N, in) Wᵀ + b with W (out, in) as stored; the result may be a transposed view (callers reshape,
    never view). Few rows as `F.linear`; from MANY_ROWS rows on the CPU as (W xᵀ)ᵀ, where the BLAS
    packs the small xᵀ rather than the whole weight at every call. No transposed copy: at opus-mt's
    layer shapes it was 0.71-1.45x as fast as this, the median near 1 (`benchmarks/int8_matmul.py
    --size opus`, fp32/fp32_t), for a second copy of every matrix."""
    if x.shape[0] < MANY_ROWS or x.device.type != "cpu":
        return F.linear(x, w, b)
    if b is None:
        return torch.mm(w, x.t()).t()
    return torch.addmm(b[:, None], w, x.t()).t()  # (out, N) -> (N, out) view


def _linear(weight: Tensor, bias: Tensor | None, precision: str) -> Linear:
    """y = x Wᵀ + b as one call. fp32 reads `weight` and `bias` as they are (the model's own tensors);
    bf16 casts x to bf16 and multiplies a bf16 copy, returning bf16; int8 is `Int8Linear`."""
    if precision == "int8":
        return Int8Linear(weight, bias).forward
    if precision == "bf16":  # the copy stored transposed (in, out): oneDNN's faster bf16 layout at every row count
        wt, b = weight.t().contiguous().bfloat16(), bias.bfloat16()  # (in, out), (out,)
        return lambda x: torch.addmm(b, x.to(torch.bfloat16), wt)
    return lambda x: _affine(x, weight, bias)


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
    """The step's view of one decoder layer: its norms (copies in int8, `_own`), its linear layers as
    `_linear` calls."""
    D = layer.self_attn.d_model
    sa, ca = layer.self_attn, layer.cross_attn
    norm = lambda n: (_own(n.weight, precision), _own(n.bias, precision))  # noqa: E731
    lin = lambda w, b: _linear(w, b, precision)  # noqa: E731
    return _Layer(
        norm(layer.sa_conn.norm), lin(sa.in_proj.weight, sa.in_proj.bias), lin(sa.out_proj.weight, sa.out_proj.bias),
        norm(layer.ca_conn.norm), lin(ca.in_proj.weight[:D], ca.in_proj.bias[:D]),
        lin(ca.in_proj.weight[D:], ca.in_proj.bias[D:]), lin(ca.out_proj.weight, ca.out_proj.bias),
        norm(layer.ff_conn.norm), lin(layer.ff.linear1.weight, layer.ff.linear1.bias),
        lin(layer.ff.linear2.weight, layer.ff.linear2.bias),
    )


class _Output:
    """The pre-softmax projection (N, D) -> logits (N, V), no bias. In fp32 and bf16, from 2 to
    FEW_ROWS rows on the CPU as (W xᵀ)ᵀ, copied to rows (the output is read by rows: at 128 rows the
    plain product measured faster than the transposed one plus its copy). fp32 reads the model's (V, D)
    matrix: a transposed copy was 1.4x as fast for 1-4 rows at 58,101 ids (`benchmarks/int8_matmul.py
    --size opus`, output, fp32/fp32_t) but is a second copy of the largest matrix (memory chose)."""

    FEW_ROWS = 64

    def __init__(self, weight: Tensor, precision: str, tied: bool = False):  # weight (V, D); tied: the embedding
        self.int8 = None
        if precision == "int8":
            self.int8 = Int8Linear(weight, None, keep_rows=tied)  # its rows: the embedding table when tied
            return
        self.w = weight.bfloat16() if precision == "bf16" else weight  # (V, D)
        self.wt = self.w.t().contiguous() if precision == "bf16" else self.w.t()  # (D, V): bf16's faster layout

    def __call__(self, x: Tensor) -> Tensor:
        if self.int8 is not None:
            return self.int8(x)
        x = x.to(self.w.dtype)
        if 1 < x.shape[0] <= self.FEW_ROWS and x.device.type == "cpu":
            return torch.mm(self.w, x.t()).t().contiguous()  # (V, N) -> (N, V)
        return x @ self.wt


def _own(t, precision: str):
    """In int8, a copy of the tensor or module `t`: the int8 decoder keeps nothing of the model, whose tensors
    share one memory-mapped file (`load_model`), so that one kept norm would keep all its pages resident."""
    if precision != "int8" or t is None:
        return t
    return copy.deepcopy(t).requires_grad_(False) if isinstance(t, nn.Module) else t.detach().clone()


def _int8_inputs(model, tied: Int8Rows | None, release: Callable[[nn.Module], None]
                 ) -> tuple[Int8Embeddings, nn.Module]:
    """The int8 decoder's token embeddings and encoder: int8 rows of the model's tables (`tied`: the
    output projection's codes, where it is the target embedding), and a copy of its encoder with
    `Int8Linear`s; each fp32 part `release`d once its copy is made."""
    tgt, src = model.decoder.embed, model.encoder.embed
    embed = Int8Embeddings(tied if tied is not None else Int8Rows.quantize(tgt.weight), tgt.scale)
    src_embed = embed if src is tgt else Int8Embeddings(Int8Rows.quantize(src.weight), src.scale)
    release(tgt)
    release(src)
    return embed, _int8_encoder(model.encoder, src_embed, release)


def _int8_encoder(encoder: nn.Module, embeddings: Int8Embeddings, release: Callable[[nn.Module], None]) -> nn.Module:
    """A copy of `encoder` with its token embeddings `embeddings` and every `nn.Linear` an `Int8Linear`
    (each fp32 one then `release`d). Each replacement goes into deepcopy's memo, so no fp32 matrix is ever
    copied (only norms and tables)."""
    memo = {id(encoder.embed): embeddings}
    for m in encoder.modules():
        if type(m) is nn.Linear:
            memo[id(m)] = Int8Linear.from_linear(m)
            release(m)
    return copy.deepcopy(encoder, memo).requires_grad_(False)


def _page_out(part: nn.Module | Tensor) -> None:
    """`runtime.page_out` of a module's parameters, or of one tensor."""
    for t in part.parameters() if isinstance(part, nn.Module) else [part]:
        page_out(t)


def _signature(model) -> list[tuple[int, int, int]]:
    """What tells a model's weights apart from those a FastDecoder was built with: each parameter's
    identity, storage and version (bumped by every in-place update, an optimizer's step included; a
    tensor made under `torch.inference_mode` has no version: its identity and storage only)."""
    return [(id(p), p.data_ptr(), -1 if p.is_inference() else p._version) for p in model.parameters()]


class FastDecoder:
    """The decoding interface of `model` (a `Transformer` in eval mode) with a faster `step`:
    `step(tokens (N,), cache) -> logits (N, V)` equals `model.step(tokens, cache)` in fp32.

    Its step also takes rows at different positions (`KVCache.start`, continuous batching).

    It decodes with the weights `model` had when it was built: if they change, `start` refuses
    (ValueError) until it is rebuilt (`model.fast_decoder()`, `Translator.refresh()`).

    `precision`: "fp32" (the model's own math and tensors); "bf16": the linear layers multiply in bf16
    (the residual stream, norms and softmax stay fp32; the encoder runs under bf16 autocast, and the
    keys/values are cached in bf16); "int8": every linear layer of the encoder and decoder, the
    cross-attention's key/value projections and the output projection multiply int8 weights by
    dynamically quantized activations (`Int8Linear`), and the token embeddings are the int8 rows of
    the same matrices; the norms, positions and copy attention stay fp32."""

    ragged_steps = True

    @torch.no_grad()
    def __init__(self, model, precision: str = "fp32"):
        _check_supported(model)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if precision == "int8" and next(model.parameters()).device.type != "cpu":
            raise ValueError("int8 decoding runs on the CPU (torch._int_mm, oneDNN); use bf16 on a GPU")
        cfg, dec = model.config, model.decoder
        self.precision = precision
        self._device = next(model.parameters()).device
        self._source, self._built_from = weakref.ref(model), _signature(model)
        self.n_heads, self.d_model = cfg.n_heads, cfg.d_model
        self.norm_first, self.eps = cfg.norm_first, cfg.layer_norm_eps
        self.max_output_length, self.max_input_length = model.max_output_length, model.max_input_length
        # int8 from a memory-mapped file: each part's fp32 pages are handed back once its int8 copy is made
        release = _page_out if precision == "int8" and getattr(model, "mapped", False) else lambda part: None
        self.layers = []
        for layer in dec.layers:
            self.layers.append(_layer(layer, precision))
            release(layer)
        final = dec.final_norm
        self.final_norm = None if final is None else (_own(final.weight, precision), _own(final.bias, precision))
        self.logits_bias, self.copy, self.positions = (_own(t, precision) for t in (model.logits_bias, model.copy,
                                                                                    dec.positions))
        self.act = ACTIVATION_FUNCTIONS[cfg.activation]  # the FFN's: ReLU in the paper
        out = dec.embed.weight if model.output_proj is None else model.output_proj.weight
        self.output = _Output(out, precision, tied=model.output_proj is None)  # (N, D) -> (N, V)
        release(out)
        self.model = None if precision == "int8" else model  # fp32 and bf16 read the rest of the live model
        self.encoder, self.embed = model.encoder, dec.embed
        if precision == "int8":
            tied = self.output.int8.rows if model.output_proj is None else None
            self.embed, self.encoder = _int8_inputs(model, tied, release)
            # quantizing's freed float temporaries stay in the heap until handed back: an opus-size int8 decoder's
            # load MB 167 -> 119 (`benchmarks/decode_speed.py --size opus`, ours_int8)
            release_freed_memory()

    # -- the decoding interface ------------------------------------------------------------
    def _check_current(self) -> None:
        model = self._source()
        if model is not None and _signature(model) != self._built_from:
            raise ValueError("the model's weights changed after its FastDecoder was built: rebuild it "
                             "(model.fast_decoder(), Translator.refresh()) to decode with them")

    @contextlib.contextmanager
    def _autocast(self):
        """bf16: the encoder (and attention pictures) under bf16 autocast, with `_kernels`."""
        if self.precision != "bf16":
            yield
            return
        with torch.autocast(self._device.type, dtype=torch.bfloat16), self._kernels():
            yield

    def _kernels(self):
        """bf16 (on CUDA): attention without cuDNN's kernel, which plans every new shape, and every
        decoding step brings one (`runtime.no_cudnn_attention`)."""
        return no_cudnn_attention(self._device) if self.precision == "bf16" else contextlib.nullcontext()

    @torch.no_grad()
    def start(self, src: Tensor, capacity: int = 64) -> KVCache:
        """Encode src (B, S) and return the decoding state: each layer's cross-attention keys and
        values (B, H, S, Dh), contiguous (read as (B·H, S, Dh) views), as `Transformer.start` does.

        The decoding thread flushes denormal floats to zero from here on (`runtime.flush_denormals`): its
        steps follow in the same thread, so `step` does not set it again."""
        flush_denormals()
        self._check_current()
        with self._autocast():
            memory, src_mask, _, _ = self.encoder(src, masks.padding_mask(src, PAD_ID))  # (B, S, D), (B, S)
            B, S, D = memory.shape
            cross = []
            for p in self.layers:
                kv = p.kv(memory.reshape(B * S, D)).reshape(B, S, 2, self.n_heads, D // self.n_heads)
                cross.append(tuple(t.transpose(1, 2).contiguous() for t in kv.unbind(2)))  # 2 x (B, H, S, Dh)
            copy_source = None if self.copy is None else (self.copy.project_keys(memory), src)
        return KVCache(cross, src_mask, capacity, copy_source)

    def attention(self, src: Tensor, tgt_in: Tensor):
        if self.model is None:
            raise ValueError("an int8 decoder keeps no fp32 weights to draw attention with: load the model "
                             "without int8 quantization for attention pictures")
        self._check_current()
        with self._autocast():
            return self.model.attention(src, tgt_in)

    def _positions(self, cache: KVCache) -> Tensor:
        """(1, D) for the usual cache, (N, D) when rows are at different positions (`KVCache.start`)."""
        rows = cache.positions()
        if rows is None:
            return self.positions(1, start=cache.length)
        return self.positions(cache.length + 1)[rows]

    def _norm(self, x: Tensor, wb: tuple[Tensor, Tensor]) -> Tensor:
        return F.layer_norm(x, (self.d_model,), wb[0], wb[1], self.eps)

    @torch.inference_mode()
    def step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """tokens (N,), each row's last token -> logits (N, V); appends one position to `cache`."""
        with self._kernels():
            return self._step(tokens, cache)

    def _step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        N, H, D = tokens.shape[0], self.n_heads, self.d_model
        x = self.embed(tokens) + self._positions(cache)  # (N, D) fp32: the residual stream
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
        if self.logits_bias is not None:
            logits = logits.add_(self.logits_bias)  # the final logits bias (Marian), in the logits' dtype
        if self.copy is None:
            return logits
        return self.copy(x[:, None], logits.float()[:, None], cache)[:, 0]


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
