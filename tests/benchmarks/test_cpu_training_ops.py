"""`benchmarks/cpu_training_ops.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import math


from bench_helpers import last_json_line


def test_cpu_training_ops_json_keys():
    out = last_json_line("cpu_training_ops.py", "--batch", "4", "--source", "6", "--target", "3", "--d-model", "16",
                         "--vocab", "40", "--repeats", "1", "--threads", "1", "--keep-freed-memory", "--json")
    assert out["keep_freed_memory"] in (True, False) and out["allocator"]
    for op in ("dropout", "attention_bf16", "copy_mixture_and_loss", "copy_decode_step_S512"):
        assert all(math.isfinite(out[f"{op}_{k}"]) and out[f"{op}_{k}"] > 0 for k in ("ours", "torch", "speedup"))
