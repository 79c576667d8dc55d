"""`aiayn summarize`: one text per input line -> one summary per output line (seed 004 §9.2)."""

from __future__ import annotations

from aiayn.commands import door, translate

HELP = "summarize texts with a model directory trained by the summarization task (one text per line)"


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory written by `aiayn train` (task summarization)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="one summary per line (default: stdout)")
    translate.add_decode_arguments(p)


def run(args) -> int:
    if args.output is not None:
        door.check_writable(args.output, [args.input])
    pipeline = door.load(args, own_command=True, **translate.pipeline_options(args))  # before reading stdin
    return door.run_lines(args, pipeline, translate.translate_kwargs(args), index_option="first_index")
