"""`aiayn import hf SRC OUT_DIR`: another toolkit's checkpoint as an aiayn model directory.
(The module is `import_`: `import` is a Python keyword.)"""

from __future__ import annotations

HELP = "import a Hugging Face checkpoint (Marian, GPT-2, BERT, ViT; a directory or a Hub name) as an aiayn model directory"


def add_arguments(p) -> None:
    formats = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    hf = formats.add_parser("hf", help="a Hugging Face model directory or Hub name (config.json, model.safetensors, tokenizer)",
                            description="Convert a MarianMTModel, GPT2LMHeadModel, GPT2Model, BertForSequenceClassification, "
                                        "BertForMaskedLM, BertModel, BertForPreTraining or ViTForImageClassification "
                                        "(safetensors weights; pickled ones are never read) into an aiayn model "
                                        "directory that every aiayn command takes. A Hub name is fetched into the "
                                        "Hugging Face cache first (HF_HUB_OFFLINE=1: from the cache only).")
    hf.add_argument("source", metavar="SRC", help="a Hugging Face model directory, or a Hub name such as "
                                                  "Helsinki-NLP/opus-mt-de-en or sentence-transformers/all-MiniLM-L6-v2")
    hf.add_argument("output", metavar="OUT_DIR", help="the aiayn model directory to write (an earlier one is replaced)")


def run(args) -> int:
    from aiayn.interop import import_hf

    out = import_hf(args.source, args.output)
    print(f"imported {args.source} -> {out}")
    return 0
