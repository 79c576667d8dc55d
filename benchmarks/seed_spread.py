"""The seed spread of finished runs: one row per run, then the mean, sd and standard error of each column.

A row is the run's own test report (RUN_DIR/test_scores.json, as `aiayn train` wrote it), the same report
decoded again on another split (`--split val`: `decode_settings.decode_row` with data.test_split, so the
split that settings were chosen on), the update and epoch the run stopped at (its last checkpoint's
trainer state), its mean target tokens/s over the train rows of metrics.jsonl, and with `--nll-at N` the
validation NLL it logged at update N. With `--set`, test and `--split` are both decoded under those
overrides (runs trained before a recipe changed its [decode]). Nothing in the run directories is written.

    python benchmarks/seed_spread.py runs/m30k-copy-wd05-s{1..8} --split val --nll-at 2000 [--json]
    python benchmarks/seed_spread.py runs/m30k-copy-d4-s{1..5} --split val --nll-at 2000 \\
        --set 'decode.length_penalty_form="plain"'
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from _common import add_common_arguments, emit_json, format_table, set_threads
from decode_settings import decode_row, scores

from aiayn.training import checkpoint as ckpt

NOT_FIGURES = ("setting", "words", "n")


def last_state(run_dir: Path) -> ckpt.TrainState:
    """The training progress (step, epoch, ...) of the run's last checkpoint."""
    last = ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR)
    if last is None:
        raise SystemExit(f"{run_dir / ckpt.CHECKPOINT_DIR}: no checkpoint")
    return ckpt.read_train_state(last)


def metrics_figures(run_dir: Path, nll_at: int) -> dict:
    """Mean target tokens/s of the train rows and, for nll_at > 0, the validation NLL logged at that update."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    speeds = [r["tokens_per_s"] for r in rows if r.get("split") == "train"]
    out = {"tok_s": statistics.mean(speeds) if speeds else math.nan}
    if nll_at:
        found = [r["nll"] for r in rows if r.get("split") == "valid" and r["step"] == nll_at]
        out[f"nll@{nll_at}"] = found[-1] if found else math.nan
    return out


def run_row(run_dir: Path, split: str, nll_at: int, setting: str = "") -> dict:
    """One run's figures; with `setting` (decode_settings' KEY=VALUE overrides) its test split is decoded
    again under it, as `split` is, instead of read from its report."""
    def decoded(overrides: str) -> dict:
        return {k: v for k, v in decode_row(run_dir, overrides).items() if k not in NOT_FIGURES}

    test = decoded(setting) if setting else scores(json.loads((run_dir / "test_scores.json").read_text()))
    state = last_state(run_dir)
    row = {"run": str(run_dir), "updates": state.step, "epochs": state.epoch,
           **metrics_figures(run_dir, nll_at), **{f"test.{k}": v for k, v in test.items()}}
    if split:
        row.update({f"{split}.{k}": v for k, v in decoded(f'{setting} data.test_split="{split}"'.strip()).items()})
    return row


def same_columns(rows: list[dict]) -> list[str]:
    """The figures every row has, in the first row's order; runs that report different figures (another task,
    another metric) have no spread, and are refused naming the first that differs."""
    columns = [k for k in rows[0] if k != "run"]
    for row in rows[1:]:
        differ = sorted(set(row) ^ set(rows[0]))
        if differ:
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            raise SystemExit(f"{row['run']}: its figures are not those of {rows[0]['run']} ({', '.join(differ[:3])}"
                             f"{more} differ); give runs of one recipe")
    return columns


def spread(rows: list[dict], columns: list[str]) -> list[dict]:
    """Rows of mean, sd and standard error (sd / √n) of each column (sd and se need two runs)."""
    values = {c: [r[c] for r in rows if not math.isnan(r[c])] for c in columns}  # a run may lack one (no train row)
    sd = {c: statistics.stdev(v) if len(v) > 1 else math.nan for c, v in values.items()}
    return [{"run": "mean", **{c: statistics.mean(v) if v else math.nan for c, v in values.items()}},
            {"run": "sd", **sd},
            {"run": "se", **{c: sd[c] / math.sqrt(max(len(values[c]), 1)) for c in columns}}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", help="finished `aiayn train` run directories")
    parser.add_argument("--split", default="", help="also decode this split (e.g. val) with the run's [decode]")
    parser.add_argument("--set", dest="setting", default="", metavar="'KEY=VALUE ...'",
                        help="decode test (and --split) again under these overrides, e.g. decode.length_penalty_form=\"plain\"")
    parser.add_argument("--nll-at", type=int, default=0, help="report the validation NLL logged at this update")
    add_common_arguments(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    rows = [run_row(run_dir, args.split, args.nll_at, args.setting) for run_dir in args.run_dirs]
    columns = same_columns(rows)
    summary = spread(rows, columns)
    print(f"{len(rows)} runs: their test reports{f', {args.split} decoded again' if args.split else ''}")
    print(format_table(rows + summary, [("run", "run", ""), *[(c, c, ".4g" if "nll" in c else ".2f") for c in columns]]))
    if args.json:
        emit_json({"benchmark": "seed_spread", "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
