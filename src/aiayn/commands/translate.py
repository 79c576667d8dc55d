"""`aiayn translate`: stdin -> stdout (or --input/--output files), one line per sentence,
through the model directory's pipeline (`aiayn.tasks.load_pipeline`; line handling in `door`).
"""

from __future__ import annotations


from aiayn.commands import door
from aiayn.commands.lines import one_line
from aiayn.config import DECODE_METHODS, DEFAULT_BATCH_TOKENS, LENGTH_PENALTY_FORMS, DecodeConfig, SamplingConfig
from aiayn.runtime import PRECISION_CHOICES

HELP = "translate text with a trained model directory (stdin to stdout, or --input/--output files)"

_D, _S = DecodeConfig(), SamplingConfig()


def add_decode_arguments(p) -> None:
    """Search flags shared with `aiayn evaluate`. Every flag defaults to unset, which takes the
    model directory's task.json, else `DecodeConfig` (§6.1) or `SamplingConfig`; the help shows those values."""
    g = p.add_argument_group("decoding", "unset flags take the model directory's own settings (task.json), "
                                          "else the defaults shown")
    g.add_argument("--method", choices=list(DECODE_METHODS), help=f"search method (default: {_D.method}; beam size 1 is greedy)")
    g.add_argument("--beam-size", type=int, help=f"beam size (default: {_D.beam_size})")
    g.add_argument("--length-penalty", type=float, help=f"α of the length penalty (default: {_D.length_penalty})")
    g.add_argument("--length-penalty-form", choices=list(LENGTH_PENALTY_FORMS),
                   help=f"gnmt: ((5+|Y|)/6)^α, plain: |Y|^α (default: {_D.length_penalty_form})")
    g.add_argument("--max-len-a", type=float, help=f"max output = a·|src| + b tokens (default a: {_D.max_len_a})")
    g.add_argument("--max-len-b", type=int, help=f"(default b: {_D.max_len_b})")
    g.add_argument("--min-len", type=int, help=f"no end of output before this many tokens (default: {_D.min_len})")
    g.add_argument("--no-repeat-ngram-size", type=int,
                   help=f"n > 0: no output repeats an n-gram of its own (default: {_D.no_repeat_ngram_size}, off)")
    g.add_argument("--temperature", type=float, help=f"sampling temperature (default: {_S.temperature})")
    g.add_argument("--top-k", type=int, help=f"sample from the k most probable tokens (default: {_S.top_k}, all)")
    g.add_argument("--top-p", type=float, help=f"nucleus sampling mass (default: {_S.top_p}, all)")
    g.add_argument("--seed", type=int, help="sampling seed: a line's sample depends only on the seed and its "
                                            "line number, not on batching or input chunks (default: unseeded)")
    g.add_argument("--batch-tokens", type=door.whole_number(2),
                   help=f"padded source tokens per batch (default: {DEFAULT_BATCH_TOKENS})")
    g.add_argument("--max-input-tokens", type=door.whole_number(2),
                   help="longer sources are truncated with a warning (default: the model's max_positions)")
    door.add_device_argument(g)
    add_precision_arguments(g)


def add_precision_arguments(g) -> None:
    """How the decoder multiplies: shared with `aiayn serve`."""
    g.add_argument("--precision", choices=PRECISION_CHOICES,
                   help="decoder arithmetic: fp32 (the model's own), bf16, or auto (bf16 where the CPU or GPU has "
                        "native bf16, else fp32); in bf16 and int8 a sentence's output can depend on what shares its "
                        "batch (a served Multi30k model: 96 and 100 of 100 identical; fp32: all) (default: fp32)")
    g.add_argument("--quantize", choices=["int8"],
                   help="int8 weights and dynamically quantized activations in the decoder and encoder (CPU); "
                        "served with `aiayn serve --backend ctranslate2`, CTranslate2's int8 (default: off)")


def pipeline_options(args) -> dict:
    """How the pipeline is built: the flags that change how sources are read and batched."""
    return {"max_input_tokens": args.max_input_tokens, "batch_tokens": args.batch_tokens,
            "precision": args.precision, "quantize": args.quantize}


def translate_kwargs(args) -> dict:
    """The decoding flags as `Translator.translate` overrides; unset ones (None) keep the config's value."""
    return dict(method=args.method, beam_size=args.beam_size, length_penalty=args.length_penalty,
                length_penalty_form=args.length_penalty_form, max_len_a=args.max_len_a,
                max_len_b=args.max_len_b, min_len=args.min_len, no_repeat_ngram_size=args.no_repeat_ngram_size,
                temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def add_arguments(p) -> None:
    door.add_model_argument(p, "model directory written by `aiayn train` (task translation)")
    p.add_argument("-i", "--input", help="source file, one sentence per line (default: stdin)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--nbest", type=int,
                   help="write the n best as 'index ||| text ||| score' lines (default: 1-best text only)")
    add_target_argument(p)
    add_decode_arguments(p)


def add_target_argument(p) -> None:
    """--target of the commands that translate (shared with `aiayn evaluate`)."""
    p.add_argument("--target", help="the output language of a multilingual model (one of its directions; "
                                    "required there unless each line starts with its tag)")


def format_nbest(index: int, hyps) -> str:
    """The n best of one sentence as 'index ||| text ||| score' lines (without the final newline)."""
    return "\n".join(f"{index} ||| {one_line(text)} ||| {score:.4f}" for text, score in hyps)


def run(args) -> int:
    if args.output is not None:
        door.check_writable(args.output, [args.input])
    pipeline = door.load(args, own_command=True, **pipeline_options(args))
    options = dict(translate_kwargs(args), nbest=args.nbest, **({"target": args.target} if args.target else {}))
    nbest = (lambda i, given, hyps: format_nbest(i, hyps)) if args.nbest is not None else None
    return door.run_lines(args, pipeline, options, nbest, index_option="first_index")
