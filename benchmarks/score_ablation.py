"""The paper's §3.2.1 comparison, measured: the same small Transformer trained with each attention score.

§3.2.1: "The two most commonly used attention functions are additive attention, and dot-product
(multiplicative) attention. [...] While for small values of d_k the two mechanisms perform similarly,
additive attention outperforms dot product attention without scaling for larger values of d_k. We
suspect that for large values of d_k, the dot products grow large in magnitude, pushing the softmax
function into regions where it has extremely small gradients. To counteract this effect, we scale
the dot products by 1/sqrt(d_k)."

Each score ("scaled_dot", the paper's; "dot", unscaled; "additive", Bahdanau's per head) trains the
Multi30k recipe's model for the same wall-clock budget through `aiayn train`, one run after another
in a separate process (a quiet machine matters: the figures are tokens per second). At the end each
run's averaged model is scored with beam 4 on the *validation* split (the recipe's test evaluation,
pointed at `val`), so no test figure enters the comparison.

    python benchmarks/score_ablation.py --minutes 10 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import add_common_arguments, emit_json, format_table

ROOT = Path(__file__).resolve().parents[1]
SCORES = ("scaled_dot", "dot", "additive")
RECIPE_WARMUP = 400  # the 30-minute recipe's; a shorter warmup gets lr_factor scaled to keep the same peak lr


def train(score: str, minutes: float, run_root: Path, recipe: Path, warmup: int, threads: int) -> Path:
    """One `aiayn train` run of the recipe with `model.attention_score = score`; returns its run dir."""
    run_dir = run_root / score
    command = [sys.executable, "-m", "aiayn", "train", str(recipe),
               "--run-dir", str(run_dir),
               "--set", f"model.attention_score={json.dumps(score)}",
               "--set", f"train.max_minutes={minutes}",
               "--set", f"optim.warmup_steps={warmup}",
               "--set", f"optim.lr_factor={(warmup / RECIPE_WARMUP) ** 0.5:.4f}",
               "--set", "data.test_split=val"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    return run_dir


def summarize(score: str, run_dir: Path) -> dict:
    """Tokens/s (mean over the training log), updates, and the final validation BLEU of one run."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    train_rows = [r for r in records if r.get("split") == "train"]
    final = json.loads((run_dir / "test_scores.json").read_text())
    valid_rows = [r for r in records if r.get("split") == "valid"]
    return {"score": score,
            "updates": max(r["step"] for r in train_rows),
            "tokens_per_s": statistics.mean(r["tokens_per_s"] for r in train_rows),
            "valid_nll": valid_rows[-1]["nll"] if valid_rows else None,
            "valid_bleu_beam4": final["bleu"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per score (wall clock)")
    parser.add_argument("--scores", nargs="+", choices=SCORES, default=list(SCORES))
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "multi30k-de-en.toml")
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "score-ablation")
    parser.add_argument("--warmup", type=int, default=150,
                        help="warmup updates (the 30-minute recipe's 400 would be most of a 10-minute run); "
                             "lr_factor is scaled by sqrt(warmup / 400), so the peak lr stays the recipe's")
    parser.add_argument("--reuse", action="store_true", help="summarize existing runs under --run-root, train none")
    add_common_arguments(parser)
    args = parser.parse_args()
    threads = args.threads or os.cpu_count() or 1
    start = time.perf_counter()
    rows = []
    for score in args.scores:
        run_dir = args.run_root / score if args.reuse else train(score, args.minutes, args.run_root, args.recipe, args.warmup, threads)
        rows.append(summarize(score, run_dir))
    base = next((r for r in rows if r["score"] == "scaled_dot"), rows[0])
    for row in rows:
        row["speed_vs_scaled_dot"] = row["tokens_per_s"] / base["tokens_per_s"]
    print(f"§3.2.1 ablation: {args.recipe.name}, {args.minutes:g} min each, warmup {args.warmup}, {threads} threads, "
          f"validation BLEU of the averaged model, beam 4 (total {(time.perf_counter() - start) / 60:.1f} min)")
    print(format_table(rows, [("score", "score", ""), ("updates", "updates", ",d"),
                              ("tokens_per_s", "tok/s", ",.0f"), ("speed_vs_scaled_dot", "× scaled", ".2f"),
                              ("valid_nll", "val nll", ".3f"), ("valid_bleu_beam4", "val BLEU", ".2f")]))
    if args.json:
        emit_json({"benchmark": "score_ablation", "minutes": args.minutes, "threads": threads,
                   "recipe": args.recipe.name, "rows": rows})


if __name__ == "__main__":
    main()
