"""`Int8Linear` against its own dequantized reference: x W_q^T + b with W_q = scale · q, the
activations unquantized. The only difference left is the activation's quantization (per row, one
step of max|x_r| / 127, half of it after rounding), so the bound below holds exactly."""

import pytest
import torch
from torch import nn

from aiayn.modules.quantized import Int8Linear, quantize_linears_


@pytest.mark.parametrize("rows", [1, 4, 33])
def test_int8_linear_equals_its_dequantized_reference_within_the_activation_step(rows):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    q = Int8Linear.from_linear(linear)
    x = torch.randn(rows, 64)
    ref = x @ q.dequantized_weight().t() + linear.bias
    half_step = x.abs().amax(1, keepdim=True) / 127 / 2  # (rows, 1)
    bound = half_step * q.dequantized_weight().abs().sum(1) + 1e-4  # (rows, out): sum_i |w_oi| · step / 2
    assert ((q(x) - ref).abs() <= bound).all()
    assert (q(x) - ref).abs().max() > 0  # the activations really are quantized: not the fp32 path
    w_err = (q.dequantized_weight() - linear.weight).abs()
    assert (w_err <= q.scale[:, None] / 2 + 1e-7).all()  # weights round to the nearest of 255 levels


def test_a_row_gives_the_same_result_whatever_shares_its_batch():
    """Activations are quantized per row: a sentence decodes the same alone or batched."""
    q = Int8Linear.from_linear(nn.Linear(8, 5))
    x = torch.randn(2, 3, 8)
    x[0] *= 100  # a neighbour with a far larger range would change a per-batch scale
    y = q(x)
    assert y.shape == (2, 3, 5)
    assert torch.equal(y[1, 2], q(x[1, 2][None])[0])


def test_quantize_linears_replaces_every_linear_and_nothing_else():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2), nn.LayerNorm(2)))
    quantize_linears_(model)
    kinds = [type(m).__name__ for m in model.modules()]
    assert kinds.count("Int8Linear") == 2 and "Linear" not in kinds and "LayerNorm" in kinds
