"""`aiayn evaluate`: score outputs against references with a task's metric (`aiayn.metrics`).

    --metric bleu    sacreBLEU BLEU and chrF, with their signatures, on detokenized text (translation)
    --metric rouge   ROUGE-1/2/L F1, rouge-score with stemming (summarization)
    --metric squad   exact match and token F1 with SQuAD v1.1's normalisation (question answering)

`--ref` may be given more than once, one aligned file per reference (AESLC's dev set has the
original subject and three annotators'): ROUGE, SQuAD and accuracy take each example's best
reference, BLEU and chrF read them as sacreBLEU's reference streams. The outputs are a hypothesis
file (`--hyp`), or `--model` answers `--src` through the model's pipeline (`aiayn.tasks.load_pipeline`:
the same door as `aiayn translate/summarize/answer/classify`, with the same line format: a QA
model reads JSON lines with "context" and "question"), and its task's metric scores them unless
`--metric` is given.
"""

from __future__ import annotations

HELP = "score outputs against references: BLEU/chrF, ROUGE, SQuAD EM/F1 or accuracy (a hypothesis file, or a model run on a source file)"


def add_arguments(p) -> None:
    from aiayn.commands.translate import add_decode_arguments, add_target_argument

    p.add_argument("--ref", required=True, action="append",
                   help="reference file, one line per output; repeat it for more references per line")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hyp", help="hypothesis file to score")
    src.add_argument("--model", help="model directory: decode --src and score the result")
    p.add_argument("--src", help="source file (with --model)")
    p.add_argument("--save-hyp", help="also write the model's outputs here (with --model)")
    from aiayn.metrics import SCORERS

    p.add_argument("--metric", choices=sorted(SCORERS),
                   help="default: the model's task's metric with --model, bleu with --hyp")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer for BLEU (default: sacreBLEU's, 13a; "
                                       "e.g. intl, char, zh, ja-mecab)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_target_argument(p)
    add_decode_arguments(p)


def run(args) -> int:
    import json

    from aiayn.commands.door import check_writable, read_lines
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
        metric = args.metric or _task_metric(args.model)
        check_tokenize(args.tokenize, metric)  # this and the rest before loading the model and decoding
        sources = read_lines(args.src)
        check_aligned(args.src, sources, args.ref[0], references[0])
        if args.save_hyp:
            check_writable(args.save_hyp, [args.src, *args.ref])
        pipeline = _pipeline(args)
        hyps = _decode(args, pipeline, sources)
    refs = references_of(references, args.ref)  # per output, its references
    kwargs = {"tokenize": args.tokenize} if metric == "bleu" else {}
    if args.hyp or args.metric:
        scores = {"metric": metric, **SCORERS[metric](hyps, refs, **kwargs)}
    else:
        scores = pipeline.score(hyps, refs, **kwargs)  # the task's own metric
    result = {**scores, "n_references": len(references)}
    print(json.dumps(result) if args.json else report(result))
    return 0


def references_of(references: list[list[str]], paths: list[str]) -> list[list[str]]:
    """Each line's references, one per --ref file, without the blank ones: a blank line is no reference (a blank
    output matched it). A line left with none is an error naming it."""
    out = []
    for number, per_line in enumerate(zip(*references), start=1):
        kept = [r for r in per_line if r.strip()]
        if not kept:
            raise ValueError(f"{paths[0]}:{number}: a blank reference{' in every --ref file' if len(paths) > 1 else ''}; "
                             "nothing to score that line against")
        out.append(kept)
    return out


def report(result: dict) -> str:
    """The scores as text, each with its signature (every "<name>_detail" of the result, in order)."""
    names = [key.removesuffix("_detail") for key in result if key.endswith("_detail")]
    return "\n".join(f"{result[f'{name}_detail']}\n  signature: {result[f'{name}_signature']}" for name in names)


def _task_metric(model_dir: str) -> str:
    """The metric of the model directory's task (read from task.json, the model not loaded); a task
    without one is an error."""
    from aiayn.tasks import task_class, task_of

    task = task_of(model_dir)
    pipeline = task_class(task).pipeline
    if not pipeline.metric:
        hint = f"; use `aiayn {pipeline.command}`" if pipeline.command else ""
        raise ValueError(f"{model_dir}: a {task} model has no metric for aiayn evaluate --model{hint}")
    return pipeline.metric


def _pipeline(args):
    from aiayn.commands.door import load
    from aiayn.commands.translate import pipeline_options

    return load(args, **pipeline_options(args))


def check_no_decoding(args) -> None:
    """--hyp scores a file as it is: flags that only a decoding model uses are an error, not ignored."""
    from aiayn.commands.translate import translate_kwargs

    decoding = {**translate_kwargs(args), "src": args.src, "save_hyp": args.save_hyp,
                "batch_tokens": args.batch_tokens, "max_input_tokens": args.max_input_tokens,
                "precision": args.precision, "quantize": args.quantize, "device": args.device, "target": args.target}
    given = ["--" + name.replace("_", "-") for name, value in decoding.items() if value is not None]
    if given:
        raise ValueError(f"{' '.join(given)}: for --model; --hyp scores the file as it is")


def check_tokenize(tokenize: str | None, metric: str) -> None:
    """Before anything is decoded: --tokenize is for BLEU, and one of sacreBLEU's tokenizers."""
    from sacrebleu.metrics import BLEU

    if tokenize and metric != "bleu":
        raise ValueError(f"--tokenize is sacreBLEU's, for --metric bleu; this is --metric {metric}")
    if tokenize and tokenize not in BLEU.TOKENIZERS:
        raise ValueError(f"--tokenize {tokenize}: not a sacreBLEU tokenizer; choose from {', '.join(BLEU.TOKENIZERS)}")


def check_aligned(path: str, lines: list[str], ref_path: str, refs: list[str]) -> None:
    """Lines are counted the way `aiayn translate` counts them: at "\n" only."""
    if len(lines) != len(refs):
        raise ValueError(f"{path} has {len(lines)} lines but {ref_path} has {len(refs)}")


def _decode(args, pipeline, sources: list[str]) -> list[str]:
    """The model's outputs for the lines `sources`, through its pipeline: read in its line format,
    answered as `aiayn translate` (and the rest) would, each output's text one line."""
    from aiayn.commands.door import answer, parse, write_lines
    from aiayn.commands.lines import one_line
    from aiayn.commands.translate import translate_kwargs

    options = {k: v for k, v in {**translate_kwargs(args), "target": args.target}.items() if v is not None}  # the flags given
    outputs = answer(pipeline, parse(pipeline, sources, args.src), options)
    hyps = [one_line(pipeline.text(o)) for o in outputs]
    if args.save_hyp:
        write_lines(args.save_hyp, [h + "\n" for h in hyps])
    return hyps
