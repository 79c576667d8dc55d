"""Training memory over time: a recipe's resident memory (VmRSS) sampled while `aiayn train` runs.

`aiayn train RECIPE` runs as a process of its own (any `--set` passed on); its VmRSS and peak
(VmHWM) are read from /proc every `--every` seconds until it exits, beside the updates it has made
(metrics.jsonl). The table has one row per sample; the summary gives the peak, the final value and
the growth after `--settled` minutes (a flat run grows by about nothing after its first minutes).

`--peer` instead trains `benchmarks/train_throughput.py`'s loop on Multi30k-length batches (a new
shape nearly every step, as token bucketing gives) for `--minutes`, ours and `nn.Transformer` each in
a process of their own with the process settings `aiayn train` makes (`runtime.keep_freed_memory`,
`runtime.bound_onednn_caches`), so the two models' memory is compared under the same loop.

    python benchmarks/train_memory.py recipes/multi30k-de-en-copy.toml --every 60
    python benchmarks/train_memory.py recipes/multi30k-de-en-copy.toml --set train.max_minutes=3 --every 10
    python benchmarks/train_memory.py --peer --config small --precision bf16 --minutes 5 --every 15
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_arguments, allocator_name, emit_json, format_table, proc_memory_mb  # noqa: E402


def sample(cmd: list[str], every: float, updates=lambda: None, env: dict | None = None) -> tuple[list[dict], int]:
    """Run `cmd`, reading its memory every `every` seconds: (rows, exit status)."""
    proc, t0, rows = subprocess.Popen(cmd, env=env), time.monotonic(), []
    while True:
        try:
            proc.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            rss, peak = proc_memory_mb(proc.pid)
            rows.append({"minute": (time.monotonic() - t0) / 60, "rss_mb": rss, "peak_mb": peak, "updates": updates()})
            print("sample " + json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept if the run is cut short
    return rows, proc.returncode


def last_update(run_dir: Path):
    """The step of metrics.jsonl's last row (None before its first)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else None
    except (OSError, ValueError, KeyError):
        return None


def summary(rows: list[dict], settled: float) -> dict:
    late = [r for r in rows if r["minute"] >= settled]
    return {"samples": len(rows), "peak_mb": max((r["peak_mb"] for r in rows), default=float("nan")),
            "final_mb": rows[-1]["rss_mb"] if rows else float("nan"),
            "settled_mb": late[0]["rss_mb"] if late else float("nan"),
            "growth_after_settled_mb": (late[-1]["rss_mb"] - late[0]["rss_mb"]) if late else float("nan")}


def run_recipe(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="train-memory-") as tmp:
        run_dir = Path(args.run_dir or tmp) / "run"
        sets = [f'train.run_dir="{run_dir}"', *args.set]
        cmd = [sys.executable, "-m", "aiayn", "train", args.recipe, *(x for s in sets for x in ("--set", s))]
        rows, status = sample(cmd, args.every, lambda: last_update(run_dir))
    return {"what": args.recipe, "sets": args.set, "status": status, "rows": rows, **summary(rows, args.settled)}


def run_peer(args) -> dict:
    """Ours and nn.Transformer, each trained by train_throughput's loop in a process of its own."""
    out = {}
    for side in ("ours", "torch"):
        cmd = [sys.executable, __file__, "--loop", side, "--config", args.config, "--precision", args.precision,
               "--minutes", str(args.minutes), "--max-tokens", str(args.max_tokens)]
        rows, status = sample(cmd, args.every)
        out[side] = {"status": status, "rows": rows, **summary(rows, args.settled)}
    return {"what": f"train_throughput loop, {args.config}, {args.precision}", **out}


def loop(args) -> int:
    """Train one model (`--loop ours|torch`) on fresh Multi30k-length batches for `--minutes`."""
    import torch

    import train_throughput as tt
    from aiayn.runtime import bound_onednn_caches, keep_freed_memory

    keep_freed_memory()  # the process settings `aiayn train` makes, for both models
    bound_onednn_caches()

    cfg = tt.model_config(args.config)
    model = tt.Transformer(cfg) if args.loop == "ours" else tt.TorchReference(cfg)
    runner = tt.Runner(args.loop, model, bf16=args.precision == "bf16")
    buckets = tt.bucket(tt.sentence_lengths(0), args.max_tokens)
    gen, deadline, i = torch.Generator().manual_seed(0), time.monotonic() + 60 * args.minutes, 0
    while time.monotonic() < deadline:
        runner.step(tt.make_batch(buckets[i * 7919 % len(buckets)], gen))
        i += 1
    print(f"{args.loop}: {i} steps", file=sys.stderr)
    return 0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", nargs="?", help="a recipe to train (not with --peer)")
    p.add_argument("--set", action="append", default=[], help="passed to aiayn train (repeatable)")
    p.add_argument("--run-dir", default="", help="keep the run here (default: a temporary directory)")
    p.add_argument("--every", type=float, default=60.0, help="seconds between samples (default: 60)")
    p.add_argument("--settled", type=float, default=5.0, help="minutes after which memory should be flat (default: 5)")
    p.add_argument("--peer", action="store_true", help="ours against nn.Transformer under train_throughput's loop")
    p.add_argument("--loop", choices=("ours", "torch"), help=argparse.SUPPRESS)
    p.add_argument("--config", default="small", help="--peer: a train_throughput config (default: small)")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"), help="--peer: (default: bf16)")
    p.add_argument("--minutes", type=float, default=5.0, help="--peer: minutes per model (default: 5)")
    p.add_argument("--max-tokens", type=int, default=2700, help="--peer: target tokens per batch (default: 2700)")
    add_common_arguments(p)
    args = p.parse_args(argv)
    if not args.loop and bool(args.recipe) == args.peer:
        p.error("give a recipe, or --peer")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.loop:
        return loop(args)
    result = run_peer(args) if args.peer else run_recipe(args)
    print(f"allocator {allocator_name()}, {os.cpu_count()} cores; {result['what']}")
    for name, part in ([("ours", result["ours"]), ("nn.Transformer", result["torch"])] if args.peer
                       else [("recipe", result)]):
        print(f"\n{name}:")
        print(format_table(part["rows"], [("minute", "minute", ".1f"), ("rss_mb", "RSS MB", ",.0f"),
                                          ("peak_mb", "peak MB", ",.0f"), ("updates", "updates", "")]))
        print(f"peak {part['peak_mb']:,.0f} MB, final {part['final_mb']:,.0f} MB, growth after minute "
              f"{args.settled:g}: {part['growth_after_settled_mb']:+,.0f} MB")
    if args.json:
        emit_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
