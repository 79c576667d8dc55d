"""`benchmarks/decode_speed.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import importlib.util
import math

import pytest

from aiayn.runtime import native_bf16
from bench_helpers import last_json_line


@pytest.mark.slow  # among the slowest smoke tests (pytest --durations): kept out of the default suite's 10 minutes
def test_decode_speed_gives_every_peer_a_speed_a_ratio_and_whether_it_wrote_our_tokens():
    out = last_json_line("decode_speed.py", "--skip", "textbook", "hf", "--runs", "1", "--preset", "tiny",
                         "--batch", "2", "--json")
    has_ct2 = importlib.util.find_spec("ctranslate2") is not None  # setup.sh installs it; a lent GPU machine lacks it
    for row in out["rows"]:
        assert row["ours"] > 0 and row["ours_int8"] > 0
        bf16 = ("ours_bf16",) if native_bf16("cpu") else ()  # timed only where the CPU multiplies bf16 natively
        assert set(row["same_as_ours"]) == {"ours_int8", *bf16, *(("ct2_fp32", "ct2_int8") if has_ct2 else ())}
        assert row["same_as_ours"].get("ct2_fp32", True)  # the same fp32 weights and search: the same tokens
        for peer in ("ct2_fp32", "ct2_int8"):
            assert row[peer] > 0 if has_ct2 else row[peer] is None
        if has_ct2:  # the JSON rounds to 3 decimals: a ratio far below 1 (a loaded machine) may differ by that much
            assert math.isclose(row["ours_int8/ct2_int8"], row["ours_int8"] / row["ct2_int8"], rel_tol=1e-2,
                                abs_tol=5e-4)
