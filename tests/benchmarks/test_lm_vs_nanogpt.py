"""`benchmarks/lm_vs_nanogpt.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_helpers import last_json_line


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_nanogpt_side_by_side_runs_a_length_nanogpt_does_not_save_at(tmp_path):
    """nanoGPT's config saves every 250 iterations and warms up for 100: 60 iterations end on a save of
    their own, and the loss is compared at the same iteration."""
    if not (Path(__file__).resolve().parents[2] / "shared" / "peers" / "nanogpt").is_dir():
        pytest.skip("../shared/peers/nanogpt is not beside the checkout")
    result = last_json_line("lm_vs_nanogpt.py", "--iters", "60", "--json")
    assert [(row["iters"], row["checkpoint_iter"]) for row in result["rows"]] == [(60, 60), (60, 60)]
