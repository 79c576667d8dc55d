"""`benchmarks/int8_matmul.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import math


from bench_helpers import last_json_line


def test_int8_matmul_times_every_candidate_and_ratio():
    out = last_json_line("int8_matmul.py", "--runs", "1", "--calls", "1", "--rows", "2", "--threads", "1", "--json")
    assert {r["layer"] for r in out["rows"]} == {"qkv", "ff1", "ff2", "output"}
    for r in out["rows"]:
        assert all(r[k] > 0 for k in ("fp32", "fp32_t", "bf16", "fbgemm", "int8_rows", "int8_packed", "int8_unpadded", "w8_only"))
        assert math.isclose(r["fp32/int8_rows"], r["fp32"] / r["int8_rows"], rel_tol=1e-2)
