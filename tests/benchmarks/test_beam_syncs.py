"""`benchmarks/beam_syncs.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations


import pytest
import torch

from bench_helpers import last_json_line


@pytest.mark.skipif(not torch.cuda.is_available(), reason="beam_syncs.py profiles decoding on a CUDA device")
def test_beam_syncs_profiles_each_decoder_per_step():
    out = last_json_line("beam_syncs.py", "--batch", "1", "--runs", "1", "--json")
    rows = {r["decoder"]: r for r in out["rows"]}
    assert set(rows) == {"ours greedy", "ours beam4", "textbook beam4"}
    assert rows["ours beam4"]["waits_per_step"] == 1.0  # the step's one summary (decoding/beam.py)
    for r in rows.values():
        assert r["kernels_per_step"] > 0 and r["gpu_ms_per_step"] > 0 and r["ms_per_step"] > 0
