"""`aiayn summarize`: one text per input line -> one summary per output line (seed 004 §9.2)."""

from __future__ import annotations

import sys

from aiayn.commands import translate

HELP = "summarize texts with a model directory trained by the summarization task (one text per line)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="model directory written by `aiayn train` (task summarization)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="one summary per line (default: stdout)")
    translate.add_decode_arguments(p)


def run(args) -> int:
    from aiayn.tasks.summarization import Summarizer

    if args.output is not None:
        translate.check_writable(args.output)
    summarizer = translate.load_translator(args, Summarizer)
    texts = translate.read_lines(args.input) if args.input else [translate.chomp(line) for line in sys.stdin]
    summaries = translate.translate_with_progress(summarizer, texts, translate.translate_kwargs(args), call=summarizer.summarize)
    translate.write_lines(args.output, [translate.one_line(s) + "\n" for s in summaries])
    return 0
