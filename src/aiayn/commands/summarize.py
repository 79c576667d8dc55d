"""`aiayn summarize`: one text per input line -> one summary per output line (seed 004 §9.2)."""

from __future__ import annotations

import sys

from aiayn.commands.translate import (add_decode_arguments, check_writable, chomp, load_translator, one_line,
                                      read_lines, translate_kwargs, translate_with_progress, write_lines)

HELP = "summarize texts with a model directory trained by the summarization task (one text per line)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="model directory written by `aiayn train` (task summarization)")
    p.add_argument("-i", "--input", help="one text per line (default: stdin)")
    p.add_argument("-o", "--output", help="one summary per line (default: stdout)")
    add_decode_arguments(p)


def run(args) -> int:
    from aiayn.tasks.summarization import Summarizer

    if args.output is not None:
        check_writable(args.output)
    summarizer = load_translator(args, Summarizer)
    texts = read_lines(args.input) if args.input else [chomp(line) for line in sys.stdin]
    summaries = translate_with_progress(summarizer, texts, translate_kwargs(args), call=summarizer.summarize)
    write_lines(args.output, [one_line(s) + "\n" for s in summaries])
    return 0
