"""`benchmarks/loss.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import math


from bench_helpers import last_json_line


def test_loss_json_keys():
    out = last_json_line("loss.py", "--rows", "64", "--vocab", "50", "--repeats", "1", "--threads", "1", "--json")
    assert (out["rows_n"], out["vocab"]) == (64, 50)
    assert all(math.isfinite(out[f"{p}_ms"]) and out[f"{p}_ms"] > 0 for p in ("ours", "autograd", "torch"))
