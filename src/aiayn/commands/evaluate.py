"""`aiayn evaluate`: score outputs against references with a task's metric (`aiayn.metrics`).

    --metric bleu    sacreBLEU BLEU and chrF, with their signatures, on detokenized text (translation)
    --metric rouge   ROUGE-1/2/L F1, rouge-score with stemming (summarization)
    --metric squad   exact match and token F1 with SQuAD v1.1's normalisation (question answering)

`--ref` may be given more than once, one aligned file per reference (AESLC's dev set has the
original subject and three annotators'): ROUGE and SQuAD take each example's best reference,
BLEU and chrF read them as sacreBLEU's reference streams. The outputs are a hypothesis file
(`--hyp`), or `--model` decodes `--src` first: a translation or summarization model, whose task
chooses the metric unless `--metric` is given. A QA model answers (context, question) pairs:
`aiayn answer -i questions.jsonl -o answers.jsonl` writes them as JSON lines with a "prediction"
field; `--hyp` scores one prediction per line (e.g. `jq -r .prediction answers.jsonl`), not those
JSON lines themselves, whose context and question words would count as answer tokens.
"""

from __future__ import annotations

HELP = "score outputs against references: BLEU/chrF, ROUGE or SQuAD EM/F1 (a hypothesis file, or a model run on a source file)"

METRIC_OF_TASK = {"translation": "bleu", "summarization": "rouge", "qa": "squad"}


def add_arguments(p) -> None:
    from aiayn.commands.translate import add_decode_arguments

    p.add_argument("--ref", required=True, action="append",
                   help="reference file, one line per output; repeat it for more references per line")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hyp", help="hypothesis file to score")
    src.add_argument("--model", help="model directory: decode --src and score the result")
    p.add_argument("--src", help="source file (with --model)")
    p.add_argument("--save-hyp", help="also write the model's outputs here (with --model)")
    p.add_argument("--metric", choices=sorted(METRIC_OF_TASK.values()),
                   help="default: the model's task (bleu for translation, rouge for summarization), or bleu for --hyp")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer for BLEU (default: sacreBLEU's, 13a; "
                                       "e.g. intl, char, zh, ja-mecab)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_decode_arguments(p)


def run(args) -> int:
    import json

    from aiayn.commands.translate import check_writable, read_lines
    from aiayn.metrics import SCORERS

    references = [read_lines(path) for path in args.ref]
    if not references[0]:
        raise ValueError(f"{args.ref[0]}: no lines to score")
    for path, lines in zip(args.ref[1:], references[1:]):
        check_aligned(path, lines, args.ref[0], references[0])
    if args.hyp:
        metric = args.metric or "bleu"
        check_tokenize(args.tokenize, metric)
        check_no_decoding(args)
        hyps = read_lines(args.hyp)
        check_aligned(args.hyp, hyps, args.ref[0], references[0])
    else:
        if not args.src:
            raise ValueError("--model needs --src (the source file to decode)")
        task = model_task(args.model)
        metric = args.metric or METRIC_OF_TASK[task]
        check_tokenize(args.tokenize, metric)  # this and the rest before spending time on decoding
        sources = read_lines(args.src)
        check_aligned(args.src, sources, args.ref[0], references[0])
        if args.save_hyp:
            check_writable(args.save_hyp)
        hyps = _decode(args, task, sources)
    refs = [list(per_line) for per_line in zip(*references)]  # per output, its references
    kwargs = {"tokenize": args.tokenize} if metric == "bleu" else {}
    result = {"metric": metric, "n_references": len(references), **SCORERS[metric](hyps, refs, **kwargs)}
    print(json.dumps(result) if args.json else report(metric, result))
    return 0


def report(metric: str, result: dict) -> str:
    """The scores as text, each with its signature."""
    if metric == "bleu":
        return (f"{result['bleu_detail']}\n  signature: {result['bleu_signature']}\n"
                f"chrF2 = {result['chrf']:.2f}\n  signature: {result['chrf_signature']}")
    names = ("rouge1", "rouge2", "rougeL") if metric == "rouge" else ("exact_match", "f1")
    return "\n".join(f"{result[f'{name}_detail']}\n  signature: {result[f'{name}_signature']}" for name in names)


def model_task(model_dir: str) -> str:
    """The task of a model directory that `aiayn evaluate --model` can decode line by line."""
    from aiayn.tasks.base import read_task_info

    task = read_task_info(model_dir).get("task", "translation")
    if task == "qa":
        raise ValueError(f"{model_dir}: a qa model answers (context, question) pairs, not lines: write its answers "
                         "with `aiayn answer -i questions.jsonl -o answers.jsonl`, put each line's \"prediction\" "
                         "on a line of its own (e.g. `jq -r .prediction answers.jsonl > answers.txt`) and score that "
                         "file with --hyp")
    if task not in METRIC_OF_TASK:
        raise ValueError(f"{model_dir}: aiayn evaluate --model decodes translation and summarization models, "
                         f"not a {task} model")
    return task


def check_no_decoding(args) -> None:
    """--hyp scores a file as it is: flags that only a decoding model uses are an error, not ignored."""
    from aiayn.commands.translate import translate_kwargs

    decoding = {**translate_kwargs(args), "src": args.src, "save_hyp": args.save_hyp,
                "batch_tokens": args.batch_tokens, "max_input_tokens": args.max_input_tokens}
    given = ["--" + name.replace("_", "-") for name, value in decoding.items() if value is not None]
    if given:
        raise ValueError(f"{' '.join(given)}: for --model; --hyp scores the file as it is")


def check_tokenize(tokenize: str | None, metric: str) -> None:
    if tokenize and metric != "bleu":
        raise ValueError(f"--tokenize is sacreBLEU's, for --metric bleu; this is --metric {metric}")


def check_aligned(path: str, lines: list[str], ref_path: str, refs: list[str]) -> None:
    """Lines are counted the way `aiayn translate` counts them: at "\n" only."""
    if len(lines) != len(refs):
        raise ValueError(f"{path} has {len(lines)} lines but {ref_path} has {len(refs)}")


def _decode(args, task: str, sources: list[str]) -> list[str]:
    """The model's outputs for `sources`, through its task's pipeline (a summarizer flattens its texts)."""
    from aiayn.commands.translate import (format_results, load_translator, translate_kwargs,
                                          translate_with_progress, write_lines)

    if task == "summarization":
        from aiayn.commands.summarize import load_summarizer, summarize_lines

        results = summarize_lines(load_summarizer(args), sources, args)
    else:
        results = translate_with_progress(load_translator(args), sources, translate_kwargs(args))
    hyps = [line.rstrip("\n") for line in format_results(results, 0, False)]
    if args.save_hyp:
        write_lines(args.save_hyp, [h + "\n" for h in hyps])
    return hyps
