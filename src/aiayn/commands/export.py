"""`aiayn export ctranslate2 MODEL_DIR OUT_DIR`: a model directory for another inference engine."""

from __future__ import annotations

from aiayn.export import QUANTIZATIONS

HELP = "export a model directory to another inference engine (ctranslate2)"


def add_arguments(p) -> None:
    formats = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    ct2 = formats.add_parser("ctranslate2", help="a CTranslate2 model, servable with `aiayn serve --backend ctranslate2`",
                             description="Convert a Transformer encoder-decoder to CTranslate2 (pip install "
                                         "'aiayn[ct2]'); OUT_DIR also gets the tokenizer, task.json and "
                                         "aiayn_export.json.")
    ct2.add_argument("model", metavar="MODEL_DIR", help="model directory written by `aiayn train` or `aiayn average`")
    ct2.add_argument("output", metavar="OUT_DIR", help="where to write the export (an earlier export there is replaced)")
    ct2.add_argument("--quantization", choices=QUANTIZATIONS, default=QUANTIZATIONS[0],
                     help=f"how weights are stored (default: {QUANTIZATIONS[0]}; int8 is about 4x smaller and "
                          "faster on CPUs)")


def run(args) -> int:
    from aiayn.export import export_ctranslate2

    out = export_ctranslate2(args.model, args.output, args.quantization)
    print(f"exported {args.model} -> {out} (CTranslate2, {args.quantization})")
    print(f"serve it: aiayn serve --backend ctranslate2 {out}")
    return 0
