"""`aiayn answer`: answer a question about a context (seed 004 §9.3).

    aiayn answer --model DIR --context "Mary went to the garden." --question "Where is Mary?"
    aiayn answer --model DIR -i questions.jsonl [-o answers.jsonl]

JSON lines in: {"context": ..., "question": ...} per line; out: the same object with
"prediction" added. A line that does not parse, or lacks a field, is an error naming the line.
"""

from __future__ import annotations

import json

from aiayn.commands import translate

HELP = "answer questions with a model directory trained by the qa task (--context/--question, or JSONL)"


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="model directory written by `aiayn train` (task qa)")
    p.add_argument("--context", help="the text the question is about")
    p.add_argument("--question", help="the question (with --context)")
    p.add_argument("-i", "--input", help='JSON lines with "context" and "question"')
    p.add_argument("-o", "--output", help="JSON lines out, with \"prediction\" (default: stdout)")
    translate.add_decode_arguments(p)


def run(args) -> int:
    from aiayn.tasks.qa import QA

    if (args.input is None) == (args.context is None or args.question is None):
        raise ValueError("give --context and --question, or -i FILE (JSON lines), not both")
    if args.output is not None:
        translate.check_writable(args.output)
    qa = translate.load_translator(args, QA)
    if args.input is None:
        print(qa.answer(args.context, args.question, **translate.translate_kwargs(args)))
        return 0
    from aiayn.data.records import read_jsonl

    rows = read_jsonl(args.input, ("context", "question"), strict=True).rows
    call = lambda sources, **kw: qa.answer([r["context"] for r in rows], [r["question"] for r in rows], **kw)  # noqa: E731
    answers = translate.translate_with_progress(qa, rows, translate.translate_kwargs(args), call=call)
    translate.write_lines(args.output, [json.dumps({**r, "prediction": a}, ensure_ascii=False) + "\n" for r, a in zip(rows, answers)])
    return 0
