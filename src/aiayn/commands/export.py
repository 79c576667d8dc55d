"""`aiayn export ctranslate2 MODEL_DIR OUT_DIR` and `aiayn export hf MODEL_DIR OUT_DIR`: a model
directory for another inference engine or toolkit."""

from __future__ import annotations

from aiayn.export import QUANTIZATIONS

HELP = "export a model directory to another inference engine or toolkit (ctranslate2, hf)"


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
    hf = formats.add_parser("hf", help="a Hugging Face model directory that transformers loads with from_pretrained",
                            description="Write an encoder-decoder as MarianMTModel, a decoder-only model as "
                                        "GPT2LMHeadModel, an encoder-only model as BertForSequenceClassification / "
                                        "BertForMaskedLM (tokens) or ViTForImageClassification (patches), with its "
                                        "tokenizer; an option with no counterpart is refused.")
    hf.add_argument("model", metavar="MODEL_DIR", help="an aiayn model directory")
    hf.add_argument("output", metavar="OUT_DIR", help="where to write it (an earlier model directory is replaced)")


def run(args) -> int:
    if args.format == "hf":
        from aiayn.interop import export_hf

        out = export_hf(args.model, args.output)
        print(f"exported {args.model} -> {out} (Hugging Face)")
        return 0
    from aiayn.export import export_ctranslate2

    out = export_ctranslate2(args.model, args.output, args.quantization)
    print(f"exported {args.model} -> {out} (CTranslate2, {args.quantization})")
    print(f"serve it: aiayn serve --backend ctranslate2 {out}")
    return 0
