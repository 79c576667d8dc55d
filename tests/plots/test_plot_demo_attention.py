"""A trained reverse-task model attends along the anti-diagonal (slow: trains the demo model)."""

import numpy as np
import pytest

from aiayn.plots import draw, save_png
from aiayn.tasks import load_pipeline
from plot_helpers import assert_picture


@pytest.mark.slow
def test_reverse_task_cross_attention_is_anti_diagonal(tmp_path):
    from aiayn.commands import demo
    result = demo.run_demo(tmp_path, ['data.task="reverse"'])
    sentence = "a b c d e f g h"
    maps = load_pipeline(result.model_dir).attention(sentence)
    assert maps.out_labels == "h g f e d c b a </s>".split()
    cross = maps.cross[-1].mean(0)  # (T, S): last layer, mean over heads
    n = len(sentence.split())
    copied_from = cross[:n].argmax(-1)  # the source position read while writing output i
    assert np.mean(copied_from == np.arange(n)[::-1]) >= 0.75
    assert_picture(save_png(draw(maps)[0], tmp_path / "a.png"), (1000, 700))
