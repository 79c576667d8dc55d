"""`benchmarks/beam_profile.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench_helpers import BENCHMARKS, last_json_line


@pytest.mark.slow  # a benchmark run of more than a few seconds
def test_beam_profile_kinds_add_up_to_the_step():
    out = last_json_line("beam_profile.py", "--preset", "tiny", "--batch", "2", "--runs", "1", "--threads", "1",
                         "--json")
    step = out["ms_per_step"]["2"]
    assert set(step) == {"matmul", "softmax", "topk", "cache", "other", "python"}
    assert all(v >= 0 for v in step.values()) and step["matmul"] > 0 and step["topk"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_beam_profile_on_cuda_counts_the_kernel_launches():
    result = subprocess.run([sys.executable, str(BENCHMARKS / "beam_profile.py"), "--preset", "tiny", "--batch", "2",
                             "--runs", "1", "--device", "cuda", "--top", "40", "--json"],
                            capture_output=True, text=True, timeout=300, check=True)
    step = json.loads(result.stdout.strip().splitlines()[-1])["ms_per_step"]["2"]
    assert step["matmul"] > 0 and "cudaLaunchKernel" in result.stdout


def test_beam_profile_sorts_op_names_into_kinds():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from beam_profile import kind_of
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert [kind_of(n) for n in ("aten::addmm", "aten::_log_softmax", "aten::topk", "aten::index_select",
                                 "aten::add_", "aten::_scaled_dot_product_flash_attention_for_cpu")] == \
        ["matmul", "softmax", "topk", "cache", "other", "matmul"]
