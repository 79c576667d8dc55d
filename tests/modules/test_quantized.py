"""`Int8Linear` against its own dequantized reference: x W_q^T + b with W_q = scale · q, the
activations unquantized. The only difference left is the activation's quantization (per row, one
step of max|x_r| / 127, half of it after rounding), so the bound below holds exactly."""

import pytest
import torch
from torch import nn

from aiayn.modules.quantized import PACKED_OUT, Int8Embeddings, Int8Linear, Int8Rows, prepack


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


@pytest.mark.parametrize("rows", [1, 3, 20])
@pytest.mark.parametrize("out", [5, PACKED_OUT])  # a layer's size; an output projection's
@pytest.mark.parametrize("packed", [True, False])  # oneDNN's packed weights; torch._int_mm on the codes
def test_a_row_gives_the_same_result_whatever_shares_its_batch(rows, packed, out):
    """Activations are quantized per row: a sentence decodes the same alone or batched."""
    q = Int8Linear(torch.randn(out, 8), torch.randn(out), keep_rows=True)
    q.packed = prepack(q.rows.codes) if packed else None  # either product at either size
    if packed and q.packed is None:
        pytest.skip("this torch has no oneDNN")
    x = torch.randn(2, rows, 8)
    x[0] *= 100  # a neighbour with a far larger range would change a per-batch scale
    y = q(x)
    assert y.shape == (2, rows, out)
    assert torch.equal(y[1, -1], q(x[1, -1][None])[0])


def test_one_int8_copy_of_a_matrix_unless_its_rows_are_read():
    """An output projection keeps the packed weights alone where oneDNN packs them, and its codes as rows too
    only for a table (`keep_rows`); a smaller layer keeps its codes alone. The same bits from both."""
    weight, x = torch.randn(PACKED_OUT, 6), torch.randn(3, 6)
    plain, table = Int8Linear(weight, None), Int8Linear(weight, None, keep_rows=True)
    assert (plain.rows is None) == torch.backends.mkldnn.is_available()
    assert table.rows is not None
    small = Int8Linear(torch.randn(PACKED_OUT - 1, 6), None)
    assert small.packed is None and small.rows is not None
    assert torch.equal(plain.dequantized_weight(), table.dequantized_weight())
    table.packed = None  # torch._int_mm on the kept codes
    assert torch.equal(plain(x), table(x))


def test_int8_embeddings_are_the_dequantized_rows_times_the_scale():
    """A tied model's int8 output projection doubles as its embedding table: rows of the same codes."""
    q = Int8Linear(torch.randn(10, 6), None, keep_rows=True)
    tokens = torch.tensor([[3, 0, 9], [9, 9, 1]])
    got = Int8Embeddings(q.rows, 2.5)(tokens)
    assert got.shape == (2, 3, 6)
    torch.testing.assert_close(got, q.dequantized_weight()[tokens] * 2.5, atol=0, rtol=0)
    alone = Int8Rows.quantize(q.dequantized_weight())  # an untied table: its own codes, the same rows
    torch.testing.assert_close(alone(tokens), q.dequantized_weight()[tokens], atol=1e-6, rtol=0)

