"""`benchmarks/seed_spread.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_helpers import benchmark, last_json_line, tiny_translation_run


def test_seed_spread_rows_are_each_runs_report_and_evaluate_on_the_split(tmp_path):
    """Per run: test figures as test_scores.json, the split's as `aiayn evaluate` on its files, the update
    and epoch of the last checkpoint, the NLL metrics.jsonl logged; then mean and sd across the runs."""
    import statistics

    runs = []
    for seed in (1, 2):
        (tmp_path / str(seed)).mkdir()
        runs.append(tiny_translation_run(tmp_path / str(seed), f"max_updates = 20\nvalidate_every = 10\nseed = {seed}\n"))
    out = last_json_line("seed_spread.py", *map(str, runs), "--split", "val", "--nll-at", "10", "--threads", "1",
                         "--json")
    for run_dir, row in zip(runs, out["rows"]):
        report = json.loads((run_dir / "test_scores.json").read_text())
        data = run_dir.parent / "data"
        ref = json.loads(subprocess.run(
            [sys.executable, "-m", "aiayn", "evaluate", "--model", str(run_dir / "model"), "--src", str(data / "val.x"),
             "--ref", str(data / "val.y"), "--json"], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert row["test.bleu"] == report["bleu"] and row["val.bleu"] == pytest.approx(ref["bleu"], abs=0.005)
        assert row["updates"] == 20 and row["epochs"] >= 1
        assert row["nll@10"] == next(r["nll"] for r in logged if r.get("split") == "valid" and r["step"] == 10)
    mean, sd, _ = out["summary"]
    for column in ("test.bleu", "val.bleu", "nll@10"):
        values = [row[column] for row in out["rows"]]
        assert mean[column] == pytest.approx(statistics.mean(values)) and sd[column] == pytest.approx(statistics.stdev(values))
    assert out["rows"][0]["nll@10"] != out["rows"][1]["nll@10"]  # two seeds, two runs


def test_seed_spread_refuses_runs_that_report_different_figures():
    spread = benchmark("seed_spread")
    bleu = [{"run": "a", "test.bleu": 40.0}, {"run": "b", "test.bleu": 41.0}]
    assert spread.same_columns(bleu) == ["test.bleu"]
    with pytest.raises(SystemExit, match=r"^c: its figures are not those of a \(test.bleu, test.rouge2 differ\)"):
        spread.same_columns([*bleu, {"run": "c", "test.rouge2": 7.0}])
