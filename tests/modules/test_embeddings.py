import math

import pytest
import torch

from aiayn.modules.embeddings import Embeddings, LearnedPositionalEncoding, SinusoidalPositionalEncoding


def formula(pos: int, i: int, d: int) -> float:
    """§3.5 written out for one entry."""
    angle = pos / 10000 ** (2 * (i // 2) / d)
    return math.sin(angle) if i % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d", [8, 10])
def test_sinusoidal_values_equal_the_formula(d):
    pe = SinusoidalPositionalEncoding(d, initial_length=16)
    table = pe(16)
    for pos in (0, 1, 7, 15):
        for i in range(d):
            assert table[pos, i].item() == pytest.approx(formula(pos, i, d), abs=1e-6)


def test_sinusoidal_extends_beyond_initial_length():
    pe = SinusoidalPositionalEncoding(8, initial_length=16)
    far = pe(3, start=5000)  # positions never seen at construction (or in any training)
    for row, pos in enumerate(range(5000, 5003)):
        for i in range(8):
            assert far[row, i].item() == pytest.approx(formula(pos, i, 8), abs=1e-5)
    torch.testing.assert_close(pe(16), SinusoidalPositionalEncoding(8, 16)(16))


def test_learned_positions_refuse_out_of_range():
    pe = LearnedPositionalEncoding(8, max_positions=4)
    assert pe(4).shape == (4, 8)
    with pytest.raises(ValueError, match="max_positions=4"):
        pe(2, start=3)


def test_embeddings_scaled_by_sqrt_d_model():
    emb = Embeddings(10, 16, pad_id=0)
    tokens = torch.tensor([[3, 0]])
    out = emb(tokens)
    torch.testing.assert_close(out[0, 0], emb.weight[3] * 4.0)
    assert torch.equal(out[0, 1], torch.zeros(16))  # padding row is zero
