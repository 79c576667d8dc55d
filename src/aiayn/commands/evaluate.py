"""`aiayn evaluate`: sacreBLEU BLEU and chrF, with their signatures, on detokenized text."""

from __future__ import annotations

HELP = "score translations with sacreBLEU BLEU and chrF (a hypothesis file, or a model run on a source file)"


def add_arguments(p) -> None:
    from aiayn.commands.translate import add_decode_arguments

    p.add_argument("--ref", required=True, help="reference file, one sentence per line")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hyp", help="hypothesis file to score")
    src.add_argument("--model", help="model directory: translate --src and score the result")
    p.add_argument("--src", help="source file (with --model)")
    p.add_argument("--save-hyp", help="also write the model's translations here (with --model)")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer for BLEU (default: sacreBLEU's, 13a; "
                                       "e.g. intl, char, zh, ja-mecab)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_decode_arguments(p)


def run(args) -> int:
    import json

    from aiayn.commands.translate import check_writable, read_lines

    refs = read_lines(args.ref)
    if args.hyp:
        hyps = read_lines(args.hyp)
        check_aligned(args.hyp, hyps, args.ref, refs)
    else:
        if not args.src:
            raise ValueError("--model needs --src (the source file to translate)")
        sources = read_lines(args.src)
        check_aligned(args.src, sources, args.ref, refs)  # before spending time on translation
        if args.save_hyp:
            check_writable(args.save_hyp)
        hyps = _translate(args, sources)
    from aiayn.metrics import translation_scores

    result = translation_scores(hyps, refs, args.tokenize)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['bleu_detail']}\n  signature: {result['bleu_signature']}")
        print(f"chrF2 = {result['chrf']:.2f}\n  signature: {result['chrf_signature']}")
    return 0


def check_aligned(path: str, lines: list[str], ref_path: str, refs: list[str]) -> None:
    """Lines are counted the way `aiayn translate` counts them: at "\n" only."""
    if len(lines) != len(refs):
        raise ValueError(f"{path} has {len(lines)} lines but {ref_path} has {len(refs)}")


def _translate(args, sources: list[str]) -> list[str]:
    from aiayn.commands.translate import (format_results, load_translator, translate_kwargs,
                                          translate_with_progress, write_lines)

    translator = load_translator(args)
    hyps = [line.rstrip("\n") for line in format_results(
        translate_with_progress(translator, sources, translate_kwargs(args)), 0, False)]
    if args.save_hyp:
        write_lines(args.save_hyp, [h + "\n" for h in hyps])
    return hyps

