"""The test report of a finished run, decoded again under other settings: one row per setting.

The run's own report (`aiayn train` writes RUN_DIR/test_scores.json) uses its `[decode]` section;
this script reruns the same report, the task's `test` through `training.pipeline.evaluate_test`,
with `--set`-style overrides, so that a claim such as "a larger length penalty does not help"
can be checked by anyone with the run directory. Each row adds the mean output length in words.

The run directory is never written: each setting writes its test.hyp and test_scores.json in a
temporary directory whose `model` and `tokenizer` link to the run's. A setting of
`train.average_last=N` makes that `model` the mean of the run's last N checkpoints instead (as
`aiayn average RUN/checkpoints --last N` does), so the averaging window can be chosen on a split
(`data.test_split="val"`) other than the one reported.

    python benchmarks/decode_settings.py runs/aeslc-summarization \\
        --try decode.length_penalty=1.0 --try decode.length_penalty=1.5 \\
        --try "decode.no_repeat_ngram_size=2 decode.beam_size=8" [--json]
    python benchmarks/decode_settings.py runs/multi30k-de-en-copy --try 'data.test_split="val"' \\
        --try 'data.test_split="val" train.average_last=1' --try 'data.test_split="val" train.average_last=5'
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import add_common_arguments, emit_json, format_table, set_threads

from aiayn.data.tokenizer import TOKENIZER_DIR
from aiayn.training import checkpoint as ckpt
from aiayn.training.average import write_average
from aiayn.training.pipeline import evaluate_test, resume_config

META = ("split", "signature", "detail", "n_sentences", "n_examples", "seconds", "beam_size", "length_penalty")


def scores(report: dict) -> dict:
    """The report's figures, flattened: {"bleu": 39.2} or {"model_all_references.rouge2": 9.26, ...}."""
    flat = {}
    for key, value in report.items():
        if key in META:
            continue
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items() if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)):
            flat[key] = value
    return flat


def model_as(run_dir: Path, train, out: Path) -> None:
    """`out`: a link to the run's model directory where `train` (the row's [train] settings) makes it
    as the run did, else, for `final = "last"` with another `average_last` N, the mean of the run's
    last N checkpoints (which it must have kept)."""
    own = resume_config(run_dir).train
    if (train.final, train.average_last) == (own.final, own.average_last):
        out.symlink_to((run_dir / ckpt.MODEL_DIR).resolve())
        return
    found = ckpt.list_checkpoints(run_dir / ckpt.CHECKPOINT_DIR)
    if train.final != "last" or len(found) < train.average_last:
        raise SystemExit(f"{run_dir / ckpt.CHECKPOINT_DIR}: {len(found)} checkpoints kept; a row can set "
                         f"train.average_last up to that many, with train.final = \"last\"")
    write_average(found[-train.average_last:], out)


def decode_row(run_dir: Path, setting: str) -> dict:
    """The test report of RUN_DIR/model with the overrides in `setting` (space-separated KEY=VALUE)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = resume_config(run_dir, [*setting.split(), f'train.run_dir="{tmp}"', "train.progress=false"])
        (Path(tmp) / TOKENIZER_DIR).symlink_to((run_dir / TOKENIZER_DIR).resolve())  # the run's vocabulary
        model_as(run_dir, cfg.train, Path(tmp) / ckpt.MODEL_DIR)
        report = evaluate_test(cfg)
        if report is None:
            raise SystemExit(f"{run_dir}: its config has no data.test_split to report on")
        hyps = (Path(tmp) / "test.hyp").read_text(encoding="utf-8").splitlines()
    words = sum(len(h.split()) for h in hyps) / max(len(hyps), 1)
    return {"setting": setting or "the run's [decode]", "words": words, "n": len(hyps), **scores(report)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished `aiayn train` run directory")
    parser.add_argument("--try", dest="settings", action="append", default=[], metavar="'KEY=VALUE ...'",
                        help="overrides of one row, e.g. decode.length_penalty=1.0 (repeatable)")
    add_common_arguments(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    rows = [decode_row(args.run_dir, setting) for setting in ["", *args.settings]]
    figures = [k for k in rows[0] if k not in ("setting", "words", "n")]
    varying = [k for k in figures if len({row.get(k) for row in rows}) > 1]
    print(f"{args.run_dir}: test report ({rows[0]['n']} examples) under each decoding setting")
    print(format_table(rows, [("setting", "setting", ""), ("words", "words/output", ".2f"),
                              *[(k, k, ".2f") for k in varying]]))
    if same := [k for k in figures if k not in varying]:  # baselines, counts: decoding leaves them alone
        print("in every row: " + ", ".join(f"{k} {rows[0][k]:g}" for k in same))
    if args.json:
        emit_json({"benchmark": "decode_settings", "run_dir": str(args.run_dir), "rows": rows})


if __name__ == "__main__":
    main()
