"""Dropout with the CPU's cheaper mask (`aiayn.modules.dropout`): exact values, the drop rate of every
one of the four 16-bit draws that share a 64-bit one, its gradient, seeding, and nn.Dropout's interface."""

import pytest
import torch

from aiayn.modules.dropout import Dropout, dropout

P = 0.2


def test_keeps_or_zeros_each_element_and_scales_the_kept():
    x = torch.rand(1000, 37) + 1.0  # no zeros of its own
    out = dropout(x, P)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * (65536 / (65536 - round(P * 65536))))


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_drop_rate_is_p_in_every_lane_of_a_draw(p):
    """Elements 4j .. 4j + 3 come from one 64-bit draw: each lane must drop at rate p (a draw whose
    sign bit is always 0 would drop none, or all, in the top lane)."""
    torch.manual_seed(0)
    n = 400_000
    dropped = dropout(torch.ones(n), p) == 0
    per_lane = dropped.view(-1, 4).float().mean(0)  # (4,)
    sigma = (p * (1 - p) / (n / 4)) ** 0.5
    assert (per_lane - p).abs().max() < 5 * sigma, per_lane


def test_gradient_is_the_mask_times_the_scale():
    x = torch.randn(50, 40, requires_grad=True)
    out = dropout(x, P)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.where(out != 0, out / x.detach(), torch.zeros(())))


def test_eval_p0_and_p1():
    x = torch.randn(8, 9)
    assert dropout(x, P, training=False) is x and dropout(x, 0.0) is x
    assert (dropout(x, 1.0) == 0).all()


def test_seeded_masks_repeat_and_keep_the_dtype():
    x = torch.randn(64, 64, dtype=torch.bfloat16)
    torch.manual_seed(3)
    a = dropout(x, P)
    torch.manual_seed(3)
    assert torch.equal(a, dropout(x, P)) and a.dtype == torch.bfloat16


def test_module_follows_train_and_eval():
    layer = Dropout(P)
    x = torch.ones(1000)
    assert (layer(x) == 0).any()
    assert torch.equal(layer.eval()(x), x)
    assert repr(layer) == "Dropout(p=0.2)"
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\]"):
        Dropout(1.5)
