"""Multi30k train (en-de), default vocabulary (joint BPE): padding efficiency of
token-bucketed vs random batches (same sentence counts), and tokenization time cold vs cached.

    .venv/bin/python benchmarks/batching.py [--json] [--max-tokens 4096] [--data-dir DIR]

Padding efficiency = real tokens / padded tokens, over source + decoder-input tensors
(target length + 1 for BOS), i.e. exactly the tensors the model sees.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from aiayn.data import load_parallel, padding_efficiency, read_corpus, train_tokenizers
from aiayn.data.batching import random_batches
from aiayn.data.tokenizer import DEFAULT_VOCAB_SIZE

from _common import SHARED_DATA, emit_json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="last stdout line is one JSON object")
    p.add_argument("--max-tokens", type=int, default=4096, help="batch budget, source + target tokens")
    p.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    p.add_argument("--data-dir", type=Path, default=SHARED_DATA / "multi30k")
    p.add_argument("--langs", nargs=2, default=["en", "de"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    langs = tuple(args.langs)
    t0 = time.perf_counter()
    corpus = read_corpus("multi30k", split="train", langs=langs, data_dir=args.data_dir)
    tokenizers = train_tokenizers(corpus.src, corpus.tgt, vocab_size=args.vocab_size)
    train_s = time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="aiayn-bench-") as cache:
        timings = []
        for _ in range(2):  # first: read + tokenize + write cache; second: cache hit
            t0 = time.perf_counter()
            ds = load_parallel("multi30k", tokenizers, split="train", langs=langs, data_dir=args.data_dir,
                               cache_dir=cache)
            timings.append(time.perf_counter() - t0)
        assert ds.from_cache

    src_lens, tgt_lens = ds.src_lengths, ds.tgt_lengths + 1
    batches = ds.sampler(args.max_tokens, seed=args.seed).batches(0)
    rand = random_batches(len(ds), [len(b) for b in batches], seed=args.seed)
    result = {
        "padding_efficiency_bucketed": round(padding_efficiency(batches, src_lens, tgt_lens), 4),
        "padding_efficiency_random": round(padding_efficiency(rand, src_lens, tgt_lens), 4),
        "tokenize_seconds_cold": round(timings[0], 4),
        "tokenize_seconds_cached": round(timings[1], 4),
    }
    print(f"Multi30k train {langs[0]}-{langs[1]}: {len(ds)} pairs, joint BPE {tokenizers.src.vocab_size}, "
          f"vocab training {train_s:.2f} s, max_tokens {args.max_tokens}, {len(batches)} batches "
          f"(mean {len(ds) / len(batches):.1f} sentences)")
    print(f"{'measure':<34}{'value':>10}")
    for key, value in result.items():
        print(f"{key:<34}{value:>10}")
    if args.json:
        emit_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
