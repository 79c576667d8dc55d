"""A character-level GPT on tiny Shakespeare, side by side with nanoGPT, in one run.

Both train the nanoGPT README's CPU configuration on the same text and split (the first 90% of
the characters train, the last 10% validate): 4 layers, 4 heads, 128 dims, block 64, batch 12,
2,000 iterations, dropout 0.

    nanoGPT   its own code (`../shared/peers/nanogpt`, copied to a temporary folder; never into
              this repository), run as a separate process with the README's command: its
              prepare.py and train.py, uncompiled on the CPU (`--compile=False`)
    aiayn     `aiayn train recipes/shakespeare-char.toml` for the same 2,000 updates

Training speed: tokens per second over the training iterations (768 tokens each), one statistic
for both: the median over windows of `WINDOW` iterations of their mean time, our trainer's
tokens/s rows (`metrics.jsonl`, one per `train.log_every` = `WINDOW` updates) and nanoGPT's `iter
N: ... time T ms` lines cut into the same windows (a slow step stays in its window's mean).

The models and the data are the same; the optimisers are each side's own: nanoGPT's AdamW (weight
decay 0.1, β2 0.99, cosine decay from 1e-3 to 1e-4) and the recipe's Adam and schedule, so the
validation losses compare the two recipes, not only the two implementations.

Validation loss, the same way for both: the mean cross-entropy over every non-overlapping
64-character block of the validation text, in order (1,742 blocks, 111,488 predicted
characters), each model in its own process (nanoGPT's checkpoint is read by nanoGPT's code).
nanoGPT's own estimate (20 random batches) is printed beside it.

    python benchmarks/lm_vs_nanogpt.py [--iters 2000] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import SHARED_DATA, add_common_arguments, emit_json, format_table

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT.parent / "shared" / "peers" / "nanogpt"
TEXT = SHARED_DATA / "tinyshakespeare" / "input.txt.gz"
SIZES = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0)
WINDOW = 50  # iterations a speed is averaged over: the recipe's train.log_every

# Runs inside the nanoGPT copy, with nanoGPT's model code: the full-validation loss of its checkpoint.
NANOGPT_EVAL = """
import numpy as np, torch
from model import GPT, GPTConfig
ckpt = torch.load('out-shakespeare-char/ckpt.pt', map_location='cpu')  # nanoGPT's own checkpoint format
model = GPT(GPTConfig(**ckpt['model_args']))
state = {k.removeprefix('_orig_mod.'): v for k, v in ckpt['model'].items()}
model.load_state_dict(state); model.eval()
val = np.fromfile('data/shakespeare_char/val.bin', dtype=np.uint16).astype(np.int64)
T = ckpt['model_args']['block_size']; n = (len(val) - 1) // T
total = 0.0
with torch.no_grad():
    for s in range(0, n, 64):
        rows = range(s, min(s + 64, n))
        x = torch.tensor(np.stack([val[r * T:r * T + T] for r in rows]))
        y = torch.tensor(np.stack([val[r * T + 1:r * T + T + 1] for r in rows]))
        logits, _ = model(x, y)
        total += torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction='sum').item()
print('FULL_VAL', total / (n * T), n * T, ckpt['iter_num'])
"""


def peer_run(command: list[str], cwd: Path, env: dict) -> str:
    """The stdout of a nanoGPT command; its failure is an error showing the end of its stderr."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"nanoGPT's {' '.join(command[1:3])} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def run_nanogpt(iters: int, threads: int, workdir: Path) -> dict:
    peer = workdir / "nanogpt"
    shutil.copytree(PEER, peer)
    data = peer / "data" / "shakespeare_char"
    (data / "input.txt").write_bytes(gzip.decompress(TEXT.read_bytes()))
    (data / "requests.py").write_text("def get(url):\n    raise RuntimeError('offline: input.txt is in place')\n")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    peer_run([sys.executable, "data/shakespeare_char/prepare.py"], peer, env)
    # its config evaluates (and saves) every 250 iterations and warms up for 100: a run of another length
    # ends on a save of its own, and a short one warms up for half its iterations (100 of 100 divided by 0)
    args = [f"--{k}={v}" for k, v in SIZES.items()] + [
        "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", f"--max_iters={iters}",
        f"--lr_decay_iters={iters}", "--always_save_checkpoint=True", f"--warmup_iters={min(100, iters // 2)}",
        f"--eval_interval={250 if iters % 250 == 0 else iters}"]
    start = time.perf_counter()
    out = peer_run([sys.executable, "train.py", "config/train_shakespeare_char.py", *args], peer, env)
    wall = time.perf_counter() - start
    times = [float(t) for n, t in re.findall(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms", out) if int(n) > 0]
    own = re.findall(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)", out)
    evaluated = peer_run([sys.executable, "-c", NANOGPT_EVAL], peer, env)
    full, n_chars, at = re.search(r"FULL_VAL ([\d.]+) (\d+) (\d+)", evaluated).groups()
    w = min(WINDOW, len(times))  # a short smoke run: one window
    ms = statistics.median(statistics.mean(times[i:i + w]) for i in range(0, len(times) - w + 1, w))
    return {"system": "nanoGPT (uncompiled)", "iters": iters, "ms_per_iter": ms,
            "tokens_per_s": SIZES["batch_size"] * SIZES["block_size"] / ms * 1000, "val_loss": float(full),
            "val_chars": int(n_chars), "own_estimate": float(own[-1][1]) if own else None, "wall_s": wall,
            "checkpoint_iter": int(at)}


def run_aiayn(iters: int, threads: int, workdir: Path) -> dict:
    run_dir = workdir / "aiayn"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "aiayn", "train", str(ROOT / "recipes" / "shakespeare-char.toml"),
               "--run-dir", str(run_dir), "--set", f'data.corpus="{TEXT}"', "--set", "train.max_minutes=0",
               "--set", f"train.max_updates={iters}", "--set", f"train.validate_every={iters}",
               "--set", "train.progress=false", "--set", "train.save_every_minutes=0",
               "--set", f"train.log_every={WINDOW}"]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    speed = statistics.median(r["tokens_per_s"] for r in rows if r.get("split") == "train")
    valid = [r for r in rows if r.get("split") == "valid"][-1]
    return {"system": "aiayn", "iters": iters, "ms_per_iter": SIZES["batch_size"] * SIZES["block_size"] / speed * 1000,
            "tokens_per_s": speed, "val_loss": valid["nll"], "val_chars": None, "own_estimate": None, "wall_s": wall,
            "checkpoint_iter": valid["step"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    add_common_arguments(parser)
    args = parser.parse_args()
    if not PEER.is_dir() or not TEXT.is_file():
        sys.exit(f"needs {PEER} and {TEXT}")
    threads = args.threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_nanogpt(args.iters, threads, Path(tmp)), run_aiayn(args.iters, threads, Path(tmp))]
    peer, ours = rows
    ours["val_chars"] = peer["val_chars"]
    for row in rows:
        row["speed_vs_nanogpt"] = row["tokens_per_s"] / peer["tokens_per_s"]
        row["val_loss_minus_nanogpt"] = row["val_loss"] - peer["val_loss"]
    print(f"tiny Shakespeare, char level, {args.iters} iterations of 12 x 64 tokens, {threads} threads; "
          f"validation: mean cross-entropy over every 64-character block of the last 10% ({peer['val_chars']:,} chars)")
    print(format_table(rows, [("system", "system", ""), ("ms_per_iter", "ms/iter", ".1f"),
                              ("tokens_per_s", "train tok/s", ",.0f"), ("speed_vs_nanogpt", "× nanoGPT", ".2f"),
                              ("val_loss", "val loss", ".4f"), ("val_loss_minus_nanogpt", "Δ loss", "+.4f"),
                              ("own_estimate", "nanoGPT's estimate", ".4f"), ("wall_s", "wall s", ".0f")]))
    if args.json:
        emit_json({"benchmark": "lm_vs_nanogpt", "threads": threads, "rows": rows})


if __name__ == "__main__":
    main()
