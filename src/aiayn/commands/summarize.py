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
    if args.output is not None:
        translate.check_writable(args.output)
    summarizer = load_summarizer(args)  # before reading stdin: another task's model fails at once
    texts = translate.read_lines(args.input) if args.input else [translate.chomp(line) for line in sys.stdin]
    translate.write_lines(args.output, [translate.one_line(s) + "\n" for s in summarize_lines(summarizer, texts, args)])
    return 0


def load_summarizer(args):
    from aiayn.tasks.summarization import Summarizer

    return translate.load_translator(args, Summarizer)


def summarize_lines(summarizer, texts: list[str], args) -> list[str]:
    """`texts` summarized with the decoding flags in `args`, under a progress bar."""
    return translate.translate_with_progress(summarizer, texts, translate.translate_kwargs(args), call=summarizer.summarize)
