"""`benchmarks/data_scale.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations


import pytest

from shared_data import SHARED_DATA
from bench_helpers import last_json_line


@pytest.mark.skipif(not (SHARED_DATA / "multi30k" / "train.en.gz").is_file(), reason="needs ../shared/data/multi30k")
def test_data_scale_prints_its_table(tmp_path):
    out = last_json_line("data_scale.py", "--sizes", "300", "--vocab-size", "600", "--loader-seconds", "0.1",
                         "--work-dir", str(tmp_path), "--json")
    (row,) = out["rows"]
    assert row["pairs"] == row["kept_pairs"] == 300 and row["ids_mb"] > 0 and row["cold_peak_mb"] > 0
    assert row["tokenize_s"] >= 0 and row["warm_to_first_batch_s"] >= 0 and not list(tmp_path.iterdir())
