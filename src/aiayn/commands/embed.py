"""`aiayn embed`: one text per input line -> its vector (or, with --pooling none, its token vectors) as a
JSON array per output line."""

from __future__ import annotations

from aiayn.commands import door

HELP = "embed texts with an encoder model directory (task embed, e.g. an imported BERT body): a JSON array per line"


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory of task embed (`aiayn import hf` of a BertModel, or `aiayn train`)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="one JSON array per line (default: stdout)")
    p.add_argument("--pooling", choices=("mean", "cls", "none"),
                   help="one vector per text: the mean of the token states or the [CLS] state; none: every token's "
                        "state, [CLS] and [SEP] included (default: task.json's, else cls)")
    p.add_argument("--normalize", action="store_true", default=None,
                   help="unit-length vectors (default: task.json's; a sentence-transformers import says)")
    p.add_argument("--no-normalize", dest="normalize", action="store_false")
    door.add_device_argument(p)


def run(args) -> int:
    if args.output is not None:
        door.check_writable(args.output, [args.input])
    options = {k: v for k, v in (("pooling", args.pooling), ("normalize", args.normalize)) if v is not None}
    return door.run_lines(args, door.load(args, own_command=True), options)
