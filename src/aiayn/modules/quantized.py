"""int8 linear layers for inference: int8 weights, activations quantized to int8 at every call.

Weights are quantized once per output channel and activations at every call per row, both
symmetric: w ≈ sw[o] · qw[o, i] and x ≈ sx[r] · qx[r, i], with q in [-127, 127] and the scale
max|·| / 127. The int8 x int8 product (int32 accumulation, VNNI or AMX where the CPU has them) is
rescaled by sw[o] · sx[r], with the bias added in fp32.

One int8 copy of each matrix (two for a tied output projection: its codes are also the embedding
table), in the layout its product is fastest from
(`benchmarks/int8_matmul.py --size opus`, int8_rows against int8_packed):
- a layer of PACKED_OUT outputs or more (an output projection) keeps oneDNN's packed weights
  (`torch.ops.onednn.qlinear_pointwise`, sw fused): opus-mt's 58,101 ids 1.7 ms against 2.6 for one
  row, 1.8 against 3.4 for 16. Fewer than MIN_ROWS rows are padded with zero rows: for one row
  oneDNN took a path up to 280x slower at some shapes (an 8,000x256 matrix, the `small` preset's
  output shape: 41 ms against 0.15 padded; `--size small`, int8_unpadded against int8_packed), and 16
  rows cost no more than one where it did not. A tied output projection keeps its codes as rows too,
  beside the packed weights (oneDNN's copy): they are the embedding table (`Int8Rows`).
- a smaller layer keeps its codes (out, in) and multiplies them with `torch._int_mm`, which repacks
  them at every call but was faster than the packed weights below 16 rows (opus-mt's ff2 87 µs
  against 126 for one row) and within 1.5x above.
Both give the same bits for a row whatever the other rows are.

Per row, as CTranslate2 and torchao's dynamic int8 do: a row's result depends on that row
alone, so a sentence decodes the same whatever else shares its batch (continuous batching's
promise). FBGEMM's fused dynamic linear (`torch.ops.quantized.linear_dynamic`, what
`torch.ao`'s dynamic quantization runs) was 1.3-2x faster per call but quantizes the whole
batch with one scale, so one sentence's outputs would change with its neighbours;
weight-only int8 (`torch._weight_int8pack_mm`) was slower than fp32 from 4 rows on.
`benchmarks/int8_matmul.py` prints the comparison.

Shape: (..., in) -> (..., out), float32 in and out.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


PACKED_OUT = 8192  # a layer of this many outputs or more multiplies oneDNN's packed weights (see the module doc)
MIN_ROWS = 16  # which run at least this many rows


def quantize_rows(t: Tensor) -> tuple[Tensor, Tensor]:
    """(M, K) float -> (int8 codes (M, K), scales (M, 1)): symmetric, one scale per row."""
    scale = t.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)  # (M, 1)
    return t.div(scale).round_().to(torch.int8), scale  # one new float buffer, rounded in place


class Int8Rows(nn.Module):
    """A (V, D) table as int8 codes with one scale per row, read by row: tokens (...,) long ->
    (..., D) float32, the dequantized rows (the token embeddings of an int8 model)."""

    def __init__(self, codes: Tensor, scale: Tensor):
        super().__init__()
        self.register_buffer("codes", codes)  # (V, D) int8
        self.register_buffer("scale", scale.view(-1))  # (V,)

    @classmethod
    def quantize(cls, weight: Tensor) -> "Int8Rows":
        return cls(*quantize_rows(weight.detach().float()))

    def forward(self, tokens: Tensor) -> Tensor:
        flat = tokens.reshape(-1)
        picked = self.codes.index_select(0, flat).float()  # (M, D)
        return picked.mul_(self.scale[flat, None]).view(*tokens.shape, self.codes.shape[1])


class Int8Linear(nn.Module):
    """`nn.Linear(in, out)` with int8 weights for inference (see the module doc). `keep_rows`: keep
    the codes as rows too (`self.rows`, an `Int8Rows`), for a matrix that is also an embedding table."""

    min_rows = MIN_ROWS  # the packed product's least row count (`benchmarks/int8_matmul.py` sets 1 to time oneDNN's own)

    def __init__(self, weight: Tensor, bias: Tensor | None, keep_rows: bool = False):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        q, scale = quantize_rows(weight.detach().float())  # (out, in), (out, 1)
        self.register_buffer("scale", scale.view(-1))  # (out,)
        self.packed = prepack(q) if self.out_features >= PACKED_OUT else None  # oneDNN's layout of the codes
        self.rows = Int8Rows(q, scale) if keep_rows or self.packed is None else None
        self.zero_points = torch.zeros(self.out_features, dtype=torch.long)  # symmetric: all 0 (oneDNN asks)
        bias = torch.zeros(self.out_features) if bias is None else bias.detach().float().clone()  # its own memory
        self.register_buffer("bias", bias.to(weight.device))
        self.has_bias = bool(bias.any())  # a zero bias (the tied output projection) is not added

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear.weight, linear.bias)

    def dequantized_weight(self) -> Tensor:
        """(out, in) float32: the weight this layer multiplies by, sw · qw (the reference in tests)."""
        codes = self.packed.to_dense().t() if self.rows is None else self.rows.codes  # (out, in)
        return codes.float() * self.scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        qx, sx = quantize_rows(x.reshape(-1, self.in_features))  # (M, in), (M, 1)
        if self.packed is None:
            y = torch.mul(torch._int_mm(qx, self.rows.codes.t()), self.scale)  # (M, out): int32 read, float written
        else:  # (qx qwᵀ) · sw as one call: x_scale 1, zero points 0, float32 out, no fused op
            m = qx.shape[0]
            if m < self.min_rows:  # zero rows below: integer products, so each row's result is the same bits
                qx = torch.cat([qx, qx.new_zeros(self.min_rows - m, self.in_features)])
            y = torch.ops.onednn.qlinear_pointwise(qx, 1.0, 0, self.packed, self.scale, self.zero_points, None,
                                                   1.0, 0, torch.float32, "none", [], "")[:m]
        y.mul_(sx)  # in place: no third buffer
        return (y.add_(self.bias) if self.has_bias else y).view(*lead, self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def prepack(q: Tensor) -> Tensor | None:
    """The codes q (out, in) packed for oneDNN's quantized linear, or None where this torch has no oneDNN or
    q is not on the CPU: `Int8Linear` then multiplies with `torch._int_mm`."""
    pack = getattr(torch.ops.onednn, "qlinear_prepack", None) if torch.backends.mkldnn.is_available() else None
    if pack is None or q.device.type != "cpu":
        return None
    return pack(q, [1, q.shape[1]])


class Int8Embeddings(nn.Module):
    """`aiayn.modules.embeddings.Embeddings` with an `Int8Rows` table: (B, T) long -> (B, T, D) float32,
    times `scale` (sqrt(d_model) where the model scales)."""

    def __init__(self, table: Int8Rows, scale: float):
        super().__init__()
        self.table, self.scale = table, scale

    def forward(self, tokens: Tensor) -> Tensor:
        return self.table(tokens).mul_(self.scale)
