import pytest

from aiayn.config import OptimConfig
from aiayn.training.schedule import SCHEDULES, adam, get_schedule, noam_lr


def test_noam_at_one_warmup_and_ten_warmup():
    d, w = 512, 4000
    assert noam_lr(1, d, w) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(w, d, w) == pytest.approx(512**-0.5 * 4000**-0.5)  # the peak, ≈ 7.0e-4
    assert noam_lr(w, d, w) == pytest.approx(6.9877e-4, rel=1e-4)
    assert noam_lr(10 * w, d, w) == pytest.approx(512**-0.5 * 40000**-0.5)
    assert noam_lr(10 * w, d, w, factor=2.0) == pytest.approx(2 * 512**-0.5 * 40000**-0.5)


def test_noam_peaks_at_warmup_with_paper_defaults():
    o = OptimConfig()
    lrs = [noam_lr(s, 512, o.warmup_steps) for s in range(1, 3 * o.warmup_steps)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == o.warmup_steps


def test_registry():
    assert SCHEDULES["noam"] is noam_lr
    assert get_schedule("inverse_sqrt")(100, 512, 100, 5e-4) == pytest.approx(5e-4)
    assert get_schedule("inverse_sqrt")(400, 512, 100, 5e-4) == pytest.approx(2.5e-4)
    assert get_schedule("constant")(50, 512, 100, 1e-3) == pytest.approx(5e-4)
    assert get_schedule("constant")(5000, 512, 100, 1e-3) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="unknown schedule 'cosine'"):
        get_schedule("cosine")


def _one_param(value: float):
    import torch

    return torch.nn.Parameter(torch.full((3,), value))


def _assert_same_steps(ours, opt, ref, ref_opt) -> None:
    """Three steps of both optimisers on the same gradients leave the same weights, bit for bit."""
    import torch

    for step in range(1, 4):
        for p, optimizer in ((ours, opt), (ref, ref_opt)):
            p.grad = torch.tensor([1.0, -2.0, 0.5]) * step
            optimizer.step()
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_adam_without_weight_decay_steps_as_torchs_adam_with_the_papers_betas():
    import torch

    ours, ref = _one_param(1.0), _one_param(1.0)
    o = OptimConfig()
    opt, ref_opt = adam([ours], o, lr=1e-2), torch.optim.Adam([ref], lr=1e-2, betas=(0.9, 0.98), eps=1e-9)
    _assert_same_steps(ours, opt, ref, ref_opt)


def test_adam_weight_decay_is_decoupled_as_torchs_adamw():
    """Against torch.optim.AdamW over a few steps; and the rule by hand: with no gradient the moments
    stay 0, so only p <- p(1 - lr·wd) moves the weight (L2 decay folded into the gradient would move
    it by about lr instead, as Adam normalises the gradient)."""
    import torch

    ours, ref = _one_param(1.0), _one_param(1.0)
    o = OptimConfig(weight_decay=0.1)
    opt = adam([ours], o, lr=1e-2)
    ref_opt = torch.optim.AdamW([ref], lr=1e-2, betas=o.betas, eps=o.eps, weight_decay=0.1)
    _assert_same_steps(ours, opt, ref, ref_opt)

    p = _one_param(2.0)
    opt = adam([p], o, lr=0.01)
    p.grad = torch.zeros(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 2.0 * (1 - 0.01 * 0.1)))
