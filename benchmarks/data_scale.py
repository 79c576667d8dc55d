"""The data pipeline at WMT's size: time and peak memory of each step, per corpus size.

A parallel corpus of N English-German pairs of news length is generated (each line two Multi30k
train sentences joined, drawn at random with a fixed seed: nothing is downloaded), and then, per N,
the training pipeline of `recipes/wmt14-en-de-base.toml` (its 37,000-piece joint BPE vocabulary,
max_tokens 12,500, max_length 256) runs as `aiayn train` runs it, in two fresh processes:

    cold   the vocabulary trained (sentencepiece, on a seeded sample of at most `input_sentence_size`
           sentences), the corpus tokenized into the preprocessing cache, the first batch made
    warm   a second start: the vocabulary and the cached ids loaded, the first batch made, then
           batches collated one after another for --loader-seconds (the loader's rate)

Each process reports its peak resident memory (VmHWM). The cache's size on disk is that of the
token ids and their spans; the id arrays alone are the `ids MB` column, the yardstick of the
pipeline's memory (the goal: peak RSS at most 2x the ids).

    python benchmarks/data_scale.py --sizes 100000,1000000,4500000 --work-dir /tmp/data-scale
    python benchmarks/data_scale.py --sizes 2000 --vocab-size 500 --json   # a smoke run
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, add_common_arguments, emit_json, format_table  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "wmt14-en-de-base.toml"


def generate(n: int, directory: Path, seed: int = 0) -> None:
    """train.en / train.de of `n` pairs, each two random Multi30k train pairs joined by a space."""
    sides = {}
    for lang in ("en", "de"):
        with gzip.open(SHARED_DATA / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            sides[lang] = [line.strip() for line in f]
    rng, m = random.Random(seed), len(sides["en"])
    picks = [(rng.randrange(m), rng.randrange(m)) for _ in range(n)]
    directory.mkdir(parents=True, exist_ok=True)
    for lang, lines in sides.items():
        with open(directory / f"train.{lang}", "w", encoding="utf-8") as f:
            f.writelines(f"{lines[a]} {lines[b]}\n" for a, b in picks)


def pipeline(corpus: Path, run_dir: Path, vocab_size: int, fresh: bool, loader_seconds: float) -> dict:
    """One start of the training pipeline, timed step by step (run in a process of its own)."""
    from aiayn.tasks import build_task
    from aiayn.training.config import load_config
    from aiayn.distributed import DistInfo

    cfg = load_config(RECIPE, [f'data.corpus="{corpus}"', 'data.valid_split=""', 'data.test_split=""',
                               f"data.vocab_size={vocab_size}", 'train.device="cpu"', f'train.run_dir="{run_dir}"'])
    task, dist, out = build_task(cfg), DistInfo(), {}
    t = time.perf_counter()
    task.tokenizers = task._tokenizers(run_dir, dist, fresh)
    out["vocab_s"], t = time.perf_counter() - t, time.perf_counter()
    full = task.dataset(cfg.data.train_split)
    task.train_set = full.filter(max_len=cfg.data.max_length)
    out["tokenize_s" if fresh else "load_s"], t = time.perf_counter() - t, time.perf_counter()
    batches = task.train_data(dist)(0)
    first = batches[0]
    out["first_batch_s"] = time.perf_counter() - t
    out["pairs"], out["tokens"] = len(task.train_set), int(full.src_lengths.sum() + full.tgt_lengths.sum())
    out["from_cache"] = full.from_cache
    if loader_seconds:
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < loader_seconds and n + 1 < len(batches):
            n += 1
            batches[n]
        out["batches_per_s"] = n / (time.perf_counter() - t)
        out["batch_shape"] = list(first.src.shape)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def child(args) -> int:
    os.environ["AIAYN_CACHE_DIR"] = str(args.cache)
    print(json.dumps(pipeline(Path(args.corpus), Path(args.run), args.vocab_size, args.phase == "cold",
                              args.loader_seconds)))
    return 0


def run_phase(phase: str, corpus: Path, run: Path, cache: Path, args) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--corpus", str(corpus), "--run", str(run),
           "--cache", str(cache), "--vocab-size", str(args.vocab_size), "--loader-seconds",
           str(args.loader_seconds if phase == "warm" else 0)]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def du_mb(directory: Path, pattern: str = "*") -> float:
    return sum(p.stat().st_size for p in directory.rglob(pattern) if p.is_file()) / 2**20


def measure(n: int, args) -> dict:
    root = Path(args.work_dir) / f"n{n}"
    shutil.rmtree(root / "run", ignore_errors=True)
    shutil.rmtree(root / "cache", ignore_errors=True)
    t = time.perf_counter()
    if not (root / "corpus" / "train.de").is_file():
        generate(n, root / "corpus")
    generated = time.perf_counter() - t
    cold = run_phase("cold", root / "corpus", root / "run", root / "cache", args)
    warm = run_phase("warm", root / "corpus", root / "run", root / "cache", args)
    ids_mb = du_mb(root / "cache", "*_ids.npy")
    row = {"pairs": n, "text_mb": du_mb(root / "corpus"), "generate_s": generated, "vocab_s": cold["vocab_s"],
           "tokenize_s": cold["tokenize_s"], "cache_mb": du_mb(root / "cache"), "ids_mb": ids_mb,
           "cold_first_batch_s": cold["first_batch_s"], "cold_peak_mb": cold["peak_rss_mb"],
           "warm_to_first_batch_s": warm["vocab_s"] + warm["load_s"] + warm["first_batch_s"],
           "batches_per_s": warm.get("batches_per_s"), "warm_peak_mb": warm["peak_rss_mb"],
           "peak_over_ids": max(cold["peak_rss_mb"], warm["peak_rss_mb"]) / ids_mb if ids_mb else float("nan"),
           "kept_pairs": cold["pairs"], "tokens": cold["tokens"], "batch_shape": warm.get("batch_shape")}
    if not args.keep:
        shutil.rmtree(root)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,1000000,4500000", help="pairs per corpus, comma-separated")
    p.add_argument("--work-dir", default="/tmp/aiayn-data-scale", help="corpora, caches and runs go here")
    p.add_argument("--vocab-size", type=int, default=37000, help="the recipe's 37,000 by default")
    p.add_argument("--loader-seconds", type=float, default=10.0, help="how long to collate batches (default 10)")
    p.add_argument("--keep", action="store_true", help="keep each size's corpus, cache and run")
    p.add_argument("--phase", choices=("cold", "warm"), help=argparse.SUPPRESS)
    for hidden in ("--corpus", "--run", "--cache"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    add_common_arguments(p)
    args = p.parse_args(argv)
    if args.phase:
        return child(args)
    rows = [measure(int(n), args) for n in args.sizes.split(",")]
    print(f"{os.cpu_count()} cores; recipe {RECIPE.name}, vocabulary {args.vocab_size:,}")
    print(format_table(rows, [
        ("pairs", "pairs", ","), ("text_mb", "text MB", ",.0f"), ("vocab_s", "vocab s", ".1f"),
        ("tokenize_s", "tokenize s", ".1f"), ("ids_mb", "ids MB", ",.0f"), ("cache_mb", "cache MB", ",.0f"),
        ("cold_peak_mb", "cold peak MB", ",.0f"), ("warm_to_first_batch_s", "warm 1st batch s", ".2f"),
        ("batches_per_s", "batches/s", ",.0f"), ("warm_peak_mb", "warm peak MB", ",.0f"),
        ("peak_over_ids", "peak/ids", ".2f")]))
    print("cold: vocabulary + tokenization into the cache; warm: a second start from the cache "
          "(vocabulary and ids loaded, first batch); peak: VmHWM of each process")
    if args.json:
        emit_json({"cores": os.cpu_count(), "vocab_size": args.vocab_size, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
