import pytest

from aiayn.config import OptimConfig
from aiayn.training.schedule import SCHEDULES, get_schedule, noam_lr


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
