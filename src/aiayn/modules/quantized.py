"""int8 linear layers for inference: int8 weights, activations quantized to int8 at every call.

Weights are quantized once per output channel and activations at every call per row, both
symmetric: w ≈ sw[o] · qw[o, i] and x ≈ sx[r] · qx[r, i], with q in [-127, 127] and the scale
max|·| / 127. The int8 x int8 product (int32 accumulation, VNNI or AMX where the CPU has them) runs
in oneDNN's quantized linear on weights packed once (`torch.ops.onednn.qlinear_pointwise`, with the
per-channel sw fused) from PACKED_ROWS rows on and for layers of PACKED_OUT outputs or more (an output
projection), else in `torch._int_mm`, which repacks the weight at every call but was as fast for a few
rows of a small layer (`benchmarks/int8_matmul.py --size opus`: opus-mt's 58,101-id output projection
1.5 ms packed against 2.8 for one row, 3.7 against 8.7 for 32). The two give the same bits, so a row's
result still depends on that row alone. The result is rescaled by sx[r] with the bias added in fp32.

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


PACKED_ROWS, PACKED_OUT = 16, 8192  # from this many rows, or outputs, on: the packed weights (see the module doc)


def quantize_rows(t: Tensor) -> tuple[Tensor, Tensor]:
    """(M, K) float -> (int8 codes (M, K), scales (M, 1)): symmetric, one scale per row."""
    scale = t.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)  # (M, 1)
    return t.div(scale).round_().to(torch.int8), scale  # one new float buffer, rounded in place


class Int8Linear(nn.Module):
    """`nn.Linear(in, out)` with int8 weights for inference (see the module doc)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        weight = weight.detach().float()
        self.out_features, self.in_features = weight.shape
        q, scale = quantize_rows(weight)  # (out, in), (out, 1)
        self.register_buffer("qweight", q)  # (out, in), read by _int_mm as its transpose: the faster layout
        self.register_buffer("scale", scale.view(-1))  # (out,)
        self.packed = _prepack(q)  # oneDNN's own layout of the codes, or None (no oneDNN, or not on the CPU)
        self.zero_points = torch.zeros(self.out_features, dtype=torch.long)  # symmetric: all 0 (oneDNN asks)
        bias = torch.zeros(self.out_features) if bias is None else bias.detach().float().clone()  # its own memory
        self.register_buffer("bias", bias.to(weight.device))
        self.has_bias = bool(bias.any())  # a zero bias (the tied output projection) is not added

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear.weight, linear.bias)

    def dequantized_weight(self) -> Tensor:
        """(out, in) float32: the weight this layer multiplies by, sw · qw (the reference in tests)."""
        return self.qweight.float() * self.scale[:, None]

    def dequantized_rows(self, rows: Tensor) -> Tensor:
        """rows (...,) long -> (..., in) float32: those rows of the dequantized weight (a tied
        output projection's rows are the token embeddings)."""
        flat = rows.reshape(-1)
        picked = self.qweight.index_select(0, flat).float()  # (M, in)
        return picked.mul_(self.scale[flat, None]).view(*rows.shape, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        qx, sx = quantize_rows(x.reshape(-1, self.in_features))  # (M, in), (M, 1)
        if self.packed is None or (qx.shape[0] < PACKED_ROWS and self.out_features < PACKED_OUT):
            y = torch.mul(torch._int_mm(qx, self.qweight.t()), self.scale)  # (M, out): int32 read, float written
        else:  # (qx qwᵀ) · sw as one call: x_scale 1, zero points 0, float32 out, no fused op
            y = torch.ops.onednn.qlinear_pointwise(qx, 1.0, 0, self.packed, self.scale, self.zero_points, None,
                                                   1.0, 0, torch.float32, "none", [], "")
        y.mul_(sx)  # in place: no third buffer
        return (y.add_(self.bias) if self.has_bias else y).view(*lead, self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def _prepack(q: Tensor) -> Tensor | None:
    """The codes q (out, in) packed for oneDNN's quantized linear (any row count), or None where this torch
    has no oneDNN or q is not on the CPU: `Int8Linear` then multiplies with `torch._int_mm`."""
    prepack = getattr(torch.ops.onednn, "qlinear_prepack", None) if torch.backends.mkldnn.is_available() else None
    if prepack is None or q.device.type != "cpu":
        return None
    return prepack(q, [1, q.shape[1]])


class Int8Embeddings(nn.Module):
    """`aiayn.modules.embeddings.Embeddings` with its table the rows of an `Int8Linear`'s weight:
    (B, T) long -> (B, T, D) float32, times `scale` (sqrt(d_model) where the model scales)."""

    def __init__(self, table: Int8Linear, scale: float):
        super().__init__()
        self.table, self.scale = table, scale

    def forward(self, tokens: Tensor) -> Tensor:
        return self.table.dequantized_rows(tokens).mul_(self.scale)
