"""`aiayn classify`: one text per input line -> `label<TAB>probability` per output line."""

from __future__ import annotations

import sys

from aiayn.commands.translate import check_writable, chomp, read_lines, write_lines
from aiayn.runtime import DEVICES_HELP
from aiayn.training.config import RunConfig

HELP = "classify texts with a model directory trained by the classify task (label and probability per line)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="model directory written by `aiayn train` (task classify)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="label<TAB>probability per line (default: stdout)")
    p.add_argument("--device", default=RunConfig.device, help=f"torch device: {DEVICES_HELP} (default: {RunConfig.device})")


def run(args) -> int:
    from aiayn.runtime import resolve_device
    from aiayn.tasks.classify import Classifier

    if args.output is not None:
        check_writable(args.output)
    classifier = Classifier.from_pretrained(args.model, device=resolve_device(args.device))
    texts = read_lines(args.input) if args.input else [chomp(line) for line in sys.stdin]
    write_lines(args.output, [f"{label}\t{p:.4f}\n" for label, p in classifier.classify(texts)])
    return 0
