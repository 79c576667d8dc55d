"""`benchmarks/compare_revisions.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import math

import pytest

from bench_helpers import BENCHMARKS, last_json_line


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_compare_revisions_of_one_checkout_against_itself():
    """Both sides run the same tree: every row of decode_speed comes back, with both medians and a ratio."""
    root = BENCHMARKS.parent
    out = last_json_line("compare_revisions.py", "--other", str(root), "--rounds", "1", "--json", "--",
                         "benchmarks/decode_speed.py", "--skip", "textbook", "hf", "ct2_fp32", "ct2_int8", "ours_bf16",
                          "ours_int8",
                          "--runs", "1", "--preset", "tiny", "--batch", "2")
    rows = {(r["strategy"], r["batch"], r["value"]): r for r in out["rows"]}
    assert set(rows) == {("greedy", 2, "ours"), ("beam4", 2, "ours")}
    for r in rows.values():
        assert r["this"] > 0 and r["other"] > 0 and math.isclose(r["ratio"], r["this"] / r["other"])
