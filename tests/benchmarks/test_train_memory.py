"""`benchmarks/train_memory.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import pytest

from bench_helpers import last_json_line


@pytest.mark.slow  # a benchmark run of more than a few seconds
def test_train_memory_prints_its_table():
    out = last_json_line("train_memory.py", "--peer", "--config", "tiny", "--precision", "fp32", "--minutes", "0.05",
                         "--every", "0.5", "--max-tokens", "300", "--json")
    for side in ("ours", "torch"):
        assert out[side]["status"] == 0 and out[side]["rows"] and out[side]["peak_mb"] > 0
