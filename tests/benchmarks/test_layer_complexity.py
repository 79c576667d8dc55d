"""`benchmarks/layer_complexity.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

from bench_helpers import last_json_line


def test_layer_complexity_json_and_table_1_columns():
    out = last_json_line("layer_complexity.py", "--d", "16", "--n", "8", "32", "--runs", "1", "--batch", "1",
                         "--threads", "1", "--json")
    rows = {(r["layer"], r["n"]): r for r in out["rows"]}
    assert rows[("recurrent (GRU)", 32)]["sequential"] == 32 and rows[("self-attention", 32)]["path"] == 1
    assert rows[("self-attention", 32)]["gflop"] > 4 * rows[("self-attention", 8)]["gflop"] * 0.99  # grows with n
    assert all(r["ms"] > 0 for r in out["rows"])
