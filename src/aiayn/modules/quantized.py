"""int8 linear layers for inference: int8 weights, activations quantized to int8 at every call.

`Int8Linear` runs torch's fused x86 kernel for dynamically quantized linear layers
(`torch.ops.quantized.linear_dynamic`, FBGEMM; the kernel behind `torch.ao`'s dynamic
quantization): one call quantizes the input per tensor (scale from its range), multiplies
int8 x int8 into int32 with VNNI where the CPU has it, and dequantizes with the bias added.
Weights are quantized per output channel, symmetric: w ≈ scale[o] · q[o, i], q in [-127, 127].

Why this kernel (`benchmarks/int8_matmul.py` prints the comparison): on the shapes of a
decoding step it was the fastest of the candidates measured, 1.3-2x ahead of `torch._int_mm`
with the quantize/dequantize ops written around it (what torchao's dynamic int8 recipe
computes), and weight-only int8 (`torch._weight_int8pack_mm`) was slower than fp32 at
batch rows >= 4. It needs no dependency beyond torch. Creating the quantized weight tensor
goes through torch's quantized-tensor API, which torch has marked deprecated; the warning
is silenced here, and the module doc of `benchmarks/int8_matmul.py` names the fallback.

On CPUs without VNNI (AVX2 only), FBGEMM's int8 products sum pairs into 16 bits and can
saturate; `reduce_range` (7-bit activations, torch.ao's default there) avoids it.

Shape: (..., in) -> (..., out), float32 in and out.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from aiayn.runtime import cpu_flags


def _has_vnni() -> bool:
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())


class Int8Linear(nn.Module):
    """`nn.Linear(in, out)` with int8 weights for inference (see the module doc)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        weight = weight.detach().float().cpu()
        self.out_features, self.in_features = weight.shape
        scale = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)  # (out,)
        q = torch.clamp(torch.round(weight / scale[:, None]), -127, 127)  # (out, in)
        self.register_buffer("scale", scale)
        self.register_buffer("qweight", q.to(torch.int8))
        bias = None if bias is None else bias.detach().float().cpu()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the quantized-tensor API's deprecation notice (module doc)
            qw = torch._make_per_channel_quantized_tensor(self.qweight, scale.double(),
                                                          torch.zeros(self.out_features, dtype=torch.long), 0)
            self._packed = torch.ops.quantized.linear_prepack(qw, bias)
        self.reduce_range = not _has_vnni()

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(linear.weight, linear.bias)

    def dequantized_weight(self) -> Tensor:
        """(out, in) float32: the weight this layer multiplies by, scale · q (the reference in tests)."""
        return self.qweight.float() * self.scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, self.in_features), self._packed, self.reduce_range)
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_linears_(module: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` inside `module` by an `Int8Linear`, in place; returns `module`."""
    for name, child in module.named_children():
        if type(child) is nn.Linear:
            setattr(module, name, Int8Linear.from_linear(child))
        else:
            quantize_linears_(child)
    return module
