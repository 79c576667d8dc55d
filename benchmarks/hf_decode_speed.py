"""Decoding speed of an imported Marian: aiayn against transformers' generate and CTranslate2.

A random-weight `MarianMTModel` of opus-mt's size (d_model 512, 6+6 layers, 8 heads, FFN 2048,
swish, a vocabulary of 58,101 ids) is saved as `transformers` saves it (tests/interop/hf_checkpoints,
tokenizers trained on ../shared/data), then decoded by three peers with the same beam and length
limit on the same German sentences:

    aiayn         `aiayn import hf`, then the model directory's pipeline (`aiayn.load_pipeline`)
    transformers  `MarianMTModel.generate` (num_beams, max_new_tokens; its pad never generated)
    ctranslate2   CTranslate2's own Marian converter (`ctranslate2.converters.TransformersConverter`)

Random weights rarely end a hypothesis, so every peer writes about `--max-new-tokens` tokens a
sentence; the table counts the target tokens each one returned (EOS excluded) per second, after one
warm-up call each, and the ratio to transformers. Runs in one process, the peers one after another.

    .venv/bin/python benchmarks/hf_decode_speed.py [--json] [--sentences 32] [--batch 32] [--beam 4]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "interop"), str(ROOT / "tests")]  # the interop tests' checkpoint builders

from _common import SHARED_DATA, add_common_arguments, emit_json, format_table, peer_installed, set_threads  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(p)  # --threads, --json
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--batch", type=int, default=32, help="sentences per call")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=58101, help="ids in the Marian vocabulary (opus-mt-de-en: 58,101)")
    p.add_argument("--no-ct2", action="store_true", help="leave CTranslate2 out")
    return p.parse_args(argv)


def sentences(n: int) -> list[str]:
    with gzip.open(SHARED_DATA / "multi30k" / "val.de.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(n), f)]


def batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def timed(run, calls: list) -> tuple[float, int]:
    """(seconds, target tokens) of `run` over every call, after one warm-up call."""
    run(calls[0])
    start, tokens = time.perf_counter(), 0
    for call in calls:
        tokens += run(call)
    return time.perf_counter() - start, tokens


def ours(model_dir: Path, texts: list[str], args) -> tuple[float, int]:
    import aiayn

    tr = aiayn.load_pipeline(model_dir, batch_tokens=10**9).translator  # one call = one batch, as for the others
    options = dict(beam_size=args.beam, max_len_a=0.0, max_len_b=args.max_new_tokens, length_penalty=1.0,
                   length_penalty_form="plain")

    def run(batch: list[str]) -> int:  # Translator.translate, its tokens counted on the way
        found = []
        with _counting(tr, found):
            tr.translate(batch, **options)
        return sum(len(hyps[0][0]) for hyps in found)  # the best hypothesis: (token ids, score)
    return timed(run, batches(texts, args.batch))


@contextlib.contextmanager
def _counting(translator, found: list):
    """Within the block, the hypotheses `translator` turns into texts are appended to `found`."""
    texts = translator._texts
    translator._texts = lambda hyps: (found.append(hyps), texts(hyps))[1]
    try:
        yield
    finally:
        del translator._texts


def hf_generate(hf_dir: Path, texts: list[str], args) -> tuple[float, int]:
    from transformers import MarianMTModel, MarianTokenizer

    model, tok = MarianMTModel.from_pretrained(hf_dir).eval(), MarianTokenizer.from_pretrained(hf_dir)
    pad = model.config.pad_token_id
    model.generation_config.forced_eos_token_id = None  # as aiayn and CTranslate2: the limit's last token is a token

    def run(batch: list[str]) -> int:
        with torch.inference_mode():
            out = model.generate(**tok(batch, return_tensors="pt", padding=True), num_beams=args.beam,
                                 max_new_tokens=args.max_new_tokens, bad_words_ids=[[pad]], do_sample=False)
        return int(((out != pad) & (out != model.config.eos_token_id)).sum())
    return timed(run, batches(texts, args.batch))


def ct2_translate(hf_dir: Path, texts: list[str], args, tmp: Path) -> tuple[float, int]:
    import ctranslate2
    from transformers import MarianTokenizer

    out = ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(tmp / "ct2"), force=True)
    translator = ctranslate2.Translator(out, device="cpu", compute_type="float32", intra_threads=args.threads)
    tok = MarianTokenizer.from_pretrained(hf_dir)

    def run(batch: list[str]) -> int:
        sources = [tok.convert_ids_to_tokens(ids) for ids in tok(batch)["input_ids"]]  # pieces + </s>
        results = translator.translate_batch(sources, beam_size=args.beam, max_decoding_length=args.max_new_tokens)
        return sum(len(r.hypotheses[0]) for r in results)
    return timed(run, batches(texts, args.batch))


def main(argv=None) -> int:
    args = parse_args(argv)
    args.threads = set_threads(args.threads)
    import hf_checkpoints

    from aiayn.interop import import_hf

    texts = sentences(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        hf_dir = hf_checkpoints.marian(tmp / "hf", d_model=args.d_model, layers=args.layers, heads=args.heads,
                                       d_ff=args.d_ff, vocab_size=args.vocab, init_std=0.02)
        model_dir = import_hf(hf_dir, tmp / "aiayn")
        print(f"built and imported a random Marian (d_model {args.d_model}, {args.layers}+{args.layers} layers, "
              f"vocabulary {args.vocab}) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        peers = {"aiayn": lambda: ours(model_dir, texts, args),
                 "transformers": lambda: hf_generate(hf_dir, texts, args)}
        if not args.no_ct2 and peer_installed("ctranslate2", "ctranslate2"):
            peers["ctranslate2"] = lambda: ct2_translate(hf_dir, texts, args, tmp)
        rows = []
        for name, run in peers.items():
            seconds, tokens = run()
            rows.append({"peer": name, "seconds": seconds, "tokens": tokens, "tok_s": tokens / seconds})
        if "ctranslate2" not in peers:
            rows.append({"peer": "ctranslate2", "seconds": None, "tokens": None, "tok_s": None})
    base = next(r["tok_s"] for r in rows if r["peer"] == "transformers")
    for r in rows:
        r["ratio_vs_transformers"] = r["tok_s"] / base if r["tok_s"] is not None else None
    print(f"beam {args.beam}, {args.sentences} sentences in batches of {args.batch}, at most {args.max_new_tokens} "
          f"target tokens each, {args.threads} threads, fp32")
    print(format_table(rows, [("peer", "peer", ""), ("tokens", "tokens", ""), ("seconds", "seconds", ".2f"),
                              ("tok_s", "tok/s", ".1f"), ("ratio_vs_transformers", "vs transformers", ".2f")]))
    if args.json:
        emit_json({"config": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
