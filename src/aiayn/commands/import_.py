"""`aiayn import hf SRC_DIR OUT_DIR`: another toolkit's checkpoint as an aiayn model directory.
(The module is `import_`: `import` is a Python keyword.)"""

from __future__ import annotations

HELP = "import a Hugging Face checkpoint (Marian, GPT-2, BERT, ViT) as an aiayn model directory"


def add_arguments(p) -> None:
    formats = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    hf = formats.add_parser("hf", help="a Hugging Face model directory (config.json, model.safetensors, tokenizer)",
                            description="Convert a MarianMTModel, GPT2LMHeadModel, BertForSequenceClassification, "
                                        "BertForMaskedLM or ViTForImageClassification directory (safetensors "
                                        "weights; pickled ones are not read) into an aiayn model directory that "
                                        "every aiayn command takes.")
    hf.add_argument("source", metavar="SRC_DIR", help="a Hugging Face model directory, e.g. a downloaded opus-mt-de-en")
    hf.add_argument("output", metavar="OUT_DIR", help="the aiayn model directory to write (an earlier one is replaced)")


def run(args) -> int:
    from aiayn.interop import import_hf

    out = import_hf(args.source, args.output)
    print(f"imported {args.source} -> {out}")
    return 0
