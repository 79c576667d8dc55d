"""BLEU of a trained model decoded by aiayn (fp32, int8, bf16) and by its CTranslate2 exports (float32 and int8).

The model directory (default: runs/multi30k-de-en/model, trained by recipes/multi30k-de-en.toml) is
exported to a temporary directory with `aiayn.export.export_ctranslate2`, once per quantization, and
Multi30k test_2016_flickr (de -> en) is translated with beam 4 and the same length penalty by
(a) aiayn's `Translator` in fp32, (b) the same with int8 weights and activations (`--quantize int8`),
(c) in bf16 (only where the CPU multiplies bf16 natively), (d) CTranslate2 float32 and (e) CTranslate2
int8 (`CT2Translator`, as `aiayn serve --backend ctranslate2` uses it). Scores are sacreBLEU on
detokenized text. Targets (`TARGETS`): float32 exports within 0.1 BLEU of aiayn fp32, int8 and bf16
within 0.5. "same" counts outputs identical to aiayn fp32's.

    .venv/bin/python benchmarks/export_bleu.py [--limit N] [--threads 2] [--json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, add_common_arguments, emit_json, format_table, peer_installed, set_threads  # noqa: E402

from aiayn.config import DecodeConfig  # noqa: E402
from aiayn.data.corpus import read_lines  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"aiayn int8": 0.5, "aiayn bf16": 0.5, "ct2 float32": 0.1, "ct2 int8": 0.5}  # largest |BLEU - aiayn fp32|


def read_split(path: Path, limit: int) -> list[str]:
    """The lines of a Multi30k file (the first `limit`, if positive); errors name the file."""
    return read_lines(path, strip=False)[:limit] if limit > 0 else read_lines(path, strip=False)


def decode(name: str, translator, sources: list[str], refs: list[str], options: dict) -> dict:
    from aiayn.metrics import bleu

    hyps = translator.translate(sources, **options)
    score = bleu(hyps, refs)
    print(f"{name}: {score.detail}", file=sys.stderr)
    return {"system": name, "bleu": score.score, "hyps": hyps, "signature": score.signature}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", type=Path, default=ROOT / "runs" / "multi30k-de-en" / "model")
    p.add_argument("--data-dir", type=Path, default=SHARED_DATA / "multi30k")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--langs", nargs=2, default=["de", "en"], metavar=("SRC", "TGT"))
    p.add_argument("--beam", type=int, default=DecodeConfig().beam_size, help="beam size (default: 4)")
    p.add_argument("--length-penalty", type=float, default=DecodeConfig().length_penalty,
                   help="GNMT alpha (default: 0.6)")
    p.add_argument("--limit", type=int, default=0, help="the first N sentences only (default: all)")
    add_common_arguments(p)
    args = p.parse_args(argv)
    threads = set_threads(args.threads)
    sources = read_split(args.data_dir / f"{args.split}.{args.langs[0]}.gz", args.limit)
    refs = read_split(args.data_dir / f"{args.split}.{args.langs[1]}.gz", args.limit)
    options = {"method": "beam", "beam_size": args.beam, "length_penalty": args.length_penalty}
    rows = run(args.model_dir, sources, refs, options, threads)
    report(rows, args, len(sources), threads)
    return 0


def run(model_dir: Path, sources: list[str], refs: list[str], options: dict, threads: int) -> list[dict]:
    from aiayn.export import export_ctranslate2
    from aiayn.export.ct2_translator import CT2Translator
    from aiayn.tasks import load_pipeline

    from aiayn.runtime import native_bf16

    model_mb = (model_dir / "model.safetensors").stat().st_size / 2**20
    rows = [decode("aiayn", load_pipeline(model_dir).translator, sources, refs, options)]
    rows[0].update(quantization="float32", model_mb=model_mb)
    for name, precision in (("int8", {"quantize": "int8"}), ("bf16", {"precision": "bf16"})):
        if name == "bf16" and not native_bf16():
            print("aiayn bf16: skipped: this CPU has no native bf16 matmuls (avx512_bf16 or AMX)", file=sys.stderr)
            continue
        row = decode(f"aiayn {name}", load_pipeline(model_dir, **precision).translator, sources, refs, options)
        rows.append({**row, "quantization": name, "model_mb": model_mb})
    with tempfile.TemporaryDirectory(prefix="aiayn-export-") as tmp:
        for quantization in ("float32", "int8") if peer_installed("ctranslate2", "ct2 rows") else ():
            out = export_ctranslate2(model_dir, Path(tmp) / quantization, quantization)
            translator = CT2Translator.from_pretrained(out, threads=threads)
            row = decode(f"ct2 {quantization}", translator, sources, refs, options)
            row.update(quantization=quantization, model_mb=(out / "model.bin").stat().st_size / 2**20)
            rows.append(row)
    reference = rows[0]["hyps"]
    for row in rows:
        row["delta"] = row["bleu"] - rows[0]["bleu"]
        row["same"] = sum(a == b for a, b in zip(row.pop("hyps"), reference)) / len(sources)
    return rows


def report(rows: list[dict], args, n: int, threads: int) -> None:
    print(f"{args.model_dir}, {args.split} {args.langs[0]}->{args.langs[1]}, {n} sentences, beam {args.beam}, "
          f"length penalty {args.length_penalty} (GNMT), {threads} threads")
    print(format_table(rows, [("system", "system", ""), ("bleu", "BLEU", ".2f"), ("delta", "vs aiayn", "+.2f"),
                              ("same", "same output", ".1%"), ("model_mb", "model MB", ".1f")]))
    print(f"sacreBLEU signature: {rows[0]['signature']}")
    checks = {r["system"]: abs(r["delta"]) <= TARGETS[r["system"]] for r in rows if r["system"] in TARGETS}
    for system, ok in checks.items():
        print(f"{system} within {TARGETS[system]} BLEU of aiayn fp32: {'yes' if ok else 'NO'}")
    if args.json:
        emit_json({"model_dir": str(args.model_dir), "split": args.split, "n_sentences": n, "beam_size": args.beam,
                   "length_penalty": args.length_penalty, "threads": threads, "signature": rows[0]["signature"],
                   "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "signature"}
                            for r in rows],
                   "within_target": checks})


if __name__ == "__main__":
    sys.exit(main())
