"""`Int8Linear` against its own dequantized reference: x W_q^T + b with W_q = scale · q, the
activations unquantized. The only difference left is the activation's quantization (per row, one
step of max|x_r| / 127, half of it after rounding), so the bound below holds exactly."""

import pytest
import torch
from torch import nn

from aiayn.modules.quantized import Int8Embeddings, Int8Linear


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


@pytest.mark.parametrize("rows", [3, 20])  # 20: oneDNN's packed weights beside one row's _int_mm
def test_a_row_gives_the_same_result_whatever_shares_its_batch(rows):
    """Activations are quantized per row: a sentence decodes the same alone or batched."""
    q = Int8Linear.from_linear(nn.Linear(8, 5))
    x = torch.randn(2, rows, 8)
    x[0] *= 100  # a neighbour with a far larger range would change a per-batch scale
    y = q(x)
    assert y.shape == (2, rows, 5) and (q.packed is not None) == torch.backends.mkldnn.is_available()
    assert torch.equal(y[1, 2], q(x[1, 2][None])[0])


def test_int8_embeddings_are_the_dequantized_rows_times_the_scale():
    """A tied model's int8 output projection doubles as its embedding table: rows of the same codes."""
    q = Int8Linear(torch.randn(10, 6), None)
    tokens = torch.tensor([[3, 0, 9], [9, 9, 1]])
    got = Int8Embeddings(q, 2.5)(tokens)
    assert got.shape == (2, 3, 6)
    torch.testing.assert_close(got, q.dequantized_weight()[tokens] * 2.5, atol=0, rtol=0)
