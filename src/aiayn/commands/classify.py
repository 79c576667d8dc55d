"""`aiayn classify`: one text (or, for a ViT, one image as a JSON array of pixel rows) per input
line -> `label<TAB>probability` per output line."""

from __future__ import annotations

from aiayn.commands import door

HELP = "classify texts (or images) with a model directory trained by a classify task (label and probability per line)"


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory written by `aiayn train` (task classify or image-classify)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="label<TAB>probability per line (default: stdout)")
    door.add_device_argument(p)


def run(args) -> int:
    if args.output is not None:
        door.check_writable(args.output, [args.input])
    return door.run_lines(args, door.load(args, own_command=True), {})
