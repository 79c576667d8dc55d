"""`aiayn answer`: answer a question about a context (seed 004 §9.3).

    aiayn answer --model DIR --context "Mary went to the garden." --question "Where is Mary?"
    aiayn answer --model DIR -i questions.jsonl [-o answers.jsonl]

JSON lines in: {"context": ..., "question": ...} per line; out: {"context", "question",
"prediction"}. A line that does not parse, or lacks a field, is an error naming the line.
"""

from __future__ import annotations

from aiayn.commands import door, translate
from aiayn.commands.lines import one_line

HELP = "answer questions with a model directory trained by the qa task (--context/--question, or JSONL)"


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory written by `aiayn train` (task qa)")
    p.add_argument("--context", type=door.text_argument, help="the text the question is about")
    p.add_argument("--question", type=door.text_argument, help="the question (with --context)")
    p.add_argument("-i", "--input", help='JSON lines with "context" and "question" (default: stdin)')
    p.add_argument("-o", "--output", help="where the answers go (default: stdout): JSON lines with \"prediction\" "
                                          "for -i, the answer's text for --context/--question")
    translate.add_decode_arguments(p)


def run(args) -> int:
    one = args.context is not None or args.question is not None
    if one and args.input is not None:
        raise ValueError("give --context and --question, or -i FILE (JSON lines), not both")
    if one and (args.context is None or args.question is None):
        raise ValueError(f"--{'question' if args.question is None else 'context'} is missing: one answer needs "
                         "--context and --question")
    if args.output is not None:
        door.check_writable(args.output, [args.input])
    pipeline = door.load(args, own_command=True, **translate.pipeline_options(args))
    if one:
        prediction = pipeline([(args.context, args.question)], **translate.translate_kwargs(args))[0]
        door.write_lines(args.output, [one_line(pipeline.text(prediction)) + "\n"])  # one answer, one line
        return 0
    return door.run_lines(args, pipeline, translate.translate_kwargs(args), index_option="first_index")
