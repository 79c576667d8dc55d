"""Smoke test of benchmarks/hf_decode_speed.py on a tiny Marian: it runs and its --json line parses.
No timing assertions: the numbers depend on the machine and its load."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_decode_speed.py"


def test_hf_decode_speed_json(shared_data):  # the script trains its tokenizer on ../shared/data
    pytest.importorskip("ctranslate2")
    result = subprocess.run([sys.executable, str(SCRIPT), "--d-model", "16", "--layers", "1", "--heads", "2",
                             "--d-ff", "32", "--vocab", "1500", "--sentences", "4", "--batch", "2",
                             "--max-new-tokens", "4", "--threads", "1", "--json"],
                            capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["peer"] for r in out["rows"]] == ["aiayn", "transformers", "ctranslate2"]
    for row in out["rows"]:
        assert row["tokens"] > 0 and math.isfinite(row["tok_s"]) and row["tok_s"] > 0
    assert out["rows"][1]["ratio_vs_transformers"] == 1.0
