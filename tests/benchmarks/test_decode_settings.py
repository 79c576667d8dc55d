"""`benchmarks/decode_settings.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_helpers import BENCHMARKS, last_json_line, tiny_translation_run


def test_decode_settings_reruns_the_runs_own_report_without_writing_to_it(tmp_path):
    """Its first row is the run's test_scores.json figure for figure; another setting decodes
    differently; the run directory is left as it was."""
    run_dir = tiny_translation_run(tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = last_json_line("decode_settings.py", str(run_dir), "--try", "decode.max_len_a=0 decode.max_len_b=1",
                         "--threads", "1", "--json")
    own, short = out["rows"]
    report = json.loads((run_dir / "test_scores.json").read_text())
    assert own["bleu"] == report["bleu"] and own["n"] == report["n_sentences"] == 60
    assert short["words"] <= 1 < own["words"]  # one token at most: the setting reached the search
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.slow  # a benchmark run of more than a few seconds
def test_decode_settings_average_last_rows_score_as_aiayn_average_then_aiayn_evaluate(tmp_path):
    """A row with another train.average_last decodes the mean of the run's last N checkpoints: its
    figures are those of `aiayn average --last N` scored by `aiayn evaluate`; asking for more
    checkpoints than the run kept is an error naming the directory."""
    from aiayn.cli import main

    run_dir = tiny_translation_run(tmp_path, "max_updates = 40\nsave_every_updates = 10\nkeep_last = 4\n"
                                              "average_last = 2\n", max_len_b=None)  # its two models' outputs end apart
    data = tmp_path / "data"
    out = last_json_line("decode_settings.py", str(run_dir), "--try", "train.average_last=1",
                         "--try", "train.average_last=4", "--threads", "1", "--json")
    rows = {row["setting"]: row for row in out["rows"]}
    for n in (1, 4):
        avg = tmp_path / f"avg{n}"
        assert main(["average", str(run_dir / "checkpoints"), "--last", str(n), "-o", str(avg)]) == 0
        hyp = tmp_path / f"avg{n}.hyp"
        ref = json.loads(subprocess.run(
            [sys.executable, "-m", "aiayn", "evaluate", "--model", str(avg), "--src", str(data / "test.x"),
             "--ref", str(data / "test.y"), "--save-hyp", str(hyp), "--json"],
            capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        words = [len(h.split()) for h in hyp.read_text().splitlines()]
        row = rows[f"train.average_last={n}"]
        assert row["bleu"] == pytest.approx(ref["bleu"], abs=0.005) and row["words"] == sum(words) / len(words)
    assert rows["train.average_last=1"]["words"] != rows["train.average_last=4"]["words"]  # different models
    result = subprocess.run([sys.executable, str(BENCHMARKS / "decode_settings.py"), str(run_dir), "--try",
                             "train.average_last=5 train.keep_last=5", "--threads", "1"], capture_output=True, text=True)
    assert result.returncode != 0 and "checkpoints: 4 checkpoints kept" in result.stderr
