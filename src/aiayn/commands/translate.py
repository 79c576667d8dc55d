"""`aiayn translate`: stdin -> stdout (or --input/--output files), one line per sentence.

Input lines end at "\n" only (a CRLF line loses its "\r"; a bare "\r" inside a line is part of
it), so there is one output line per input line, and no output line contains a line break.
"""

from __future__ import annotations

import sys
from itertools import islice

from aiayn.config import DECODE_METHODS, DecodeConfig, SamplingConfig
from aiayn.runtime import DEVICES_HELP
from aiayn.training.config import RunConfig

HELP = "translate text with a trained model directory (stdin to stdout, or --input/--output files)"

_D, _S = DecodeConfig(), SamplingConfig()
STDIN_CHUNK = 2000  # lines translated (and written) together when reading a pipe


def add_decode_arguments(p) -> None:
    """Search flags shared with `aiayn evaluate`. Every flag defaults to unset, which takes the
    value of `DecodeConfig` (§6.1) or `SamplingConfig`; the help shows those values."""
    g = p.add_argument_group("decoding")
    g.add_argument("--method", choices=list(DECODE_METHODS), help=f"search method (default: {_D.method}; beam size 1 is greedy)")
    g.add_argument("--beam-size", type=int, help=f"beam size (default: {_D.beam_size})")
    g.add_argument("--length-penalty", type=float, help=f"α of the length penalty (default: {_D.length_penalty})")
    g.add_argument("--length-penalty-form", choices=["gnmt", "plain"],
                   help=f"gnmt: ((5+|Y|)/6)^α, plain: |Y|^α (default: {_D.length_penalty_form})")
    g.add_argument("--max-len-a", type=float, help=f"max output = a·|src| + b tokens (default a: {_D.max_len_a})")
    g.add_argument("--max-len-b", type=int, help=f"(default b: {_D.max_len_b})")
    g.add_argument("--no-repeat-ngram-size", type=int,
                   help=f"n > 0: no output repeats an n-gram of its own (default: {_D.no_repeat_ngram_size}, off)")
    g.add_argument("--temperature", type=float, help=f"sampling temperature (default: {_S.temperature})")
    g.add_argument("--top-k", type=int, help=f"sample from the k most probable tokens (default: {_S.top_k}, all)")
    g.add_argument("--top-p", type=float, help=f"nucleus sampling mass (default: {_S.top_p}, all)")
    g.add_argument("--seed", type=int, help="sampling seed: a line's sample depends only on the seed and its "
                                            "line number, not on batching or input chunks (default: unseeded)")
    g.add_argument("--batch-tokens", type=int,
                   help="padded source tokens per batch (default: aiayn.decoding.translator.DEFAULT_BATCH_TOKENS)")
    g.add_argument("--max-input-tokens", type=int,
                   help="longer sources are truncated with a warning (default: the model's max_positions)")
    g.add_argument("--device", default=RunConfig.device, help=f"torch device: {DEVICES_HELP} (default: {RunConfig.device})")


def load_translator(args, pipeline=None):
    """The model directory `args.model` as a `Translator`, or as `pipeline` (e.g. `Summarizer`)."""
    from aiayn.decoding.translator import Translator
    from aiayn.runtime import resolve_device

    kwargs = {"max_input_tokens": args.max_input_tokens}
    if args.batch_tokens is not None:
        kwargs["batch_tokens"] = args.batch_tokens
    return (pipeline or Translator).from_pretrained(args.model, device=resolve_device(args.device), **kwargs)


def translate_kwargs(args) -> dict:
    """The decoding flags as `Translator.translate` overrides; unset ones (None) keep the config's value."""
    return dict(method=args.method, beam_size=args.beam_size, length_penalty=args.length_penalty,
                length_penalty_form=args.length_penalty_form, max_len_a=args.max_len_a,
                max_len_b=args.max_len_b, no_repeat_ngram_size=args.no_repeat_ngram_size, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, seed=args.seed)


def add_arguments(p) -> None:
    p.add_argument("model", help="model directory (config.json, model.safetensors, tokenizer files)")
    p.add_argument("-i", "--input", help="source file, one sentence per line (default: stdin)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--nbest", type=int,
                   help="write the n best as 'index ||| text ||| score' lines (default: 1-best text only)")
    add_decode_arguments(p)


def one_line(text: str) -> str:
    """A translation never breaks output alignment: line breaks inside it become spaces."""
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


def format_results(results, first_index: int, nbest: bool) -> list[str]:
    if not nbest:
        return [one_line(r) + "\n" for r in results]
    return [f"{first_index + i} ||| {one_line(text)} ||| {score:.4f}\n"
            for i, hyps in enumerate(results) for text, score in hyps]


def read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 file (`.gz` decompressed, invalid bytes replaced), split on "\n" only; see `chomp`."""
    from aiayn.data.corpus import read_text_file

    lines = read_text_file(path, errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line
    return [chomp(line) for line in lines]


def chomp(line: str) -> str:
    """`line` without its "\n" and, for a CRLF line end, the "\r" before it. Text opened with
    newline="\n" splits on "\n" alone; the default (universal newlines) would split at a bare "\r"."""
    return line.removesuffix("\n").removesuffix("\r")


def run(args) -> int:
    import io

    if args.output is not None:
        check_writable(args.output)
    translator = load_translator(args)
    kwargs = dict(translate_kwargs(args), nbest=args.nbest)
    if args.input is not None:
        lines = read_lines(args.input)
        out = format_results(translate_with_progress(translator, lines, kwargs), 0, args.nbest is not None)
        write_lines(args.output, out)
        return 0
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
    chunk = 1 if stdin.isatty() else STDIN_CHUNK
    sink = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        done = 0
        while lines := [chomp(line) for line in islice(stdin, chunk)]:
            results = translator.translate(lines, first_index=done, **kwargs)  # line numbers seed samples
            sink.writelines(format_results(results, done, args.nbest is not None))
            sink.flush()
            done += len(lines)
    finally:
        if sink is not sys.stdout:
            sink.close()
    return 0


def translate_with_progress(translator, lines: list[str], kwargs: dict, call=None):
    """`call(lines, progress=..., **kwargs)` (default `translator.translate`) under a progress bar."""
    from tqdm import tqdm

    with tqdm(total=len(lines), unit="sent", file=sys.stderr, dynamic_ncols=True) as bar:
        return (call or translator.translate)(lines, progress=bar.update, **kwargs)


def check_writable(path: str) -> None:
    """Fail before translating, not after, when `path` cannot be written: its nearest existing
    folder is a file or not writable. The error names that folder."""
    import errno
    import os
    from pathlib import Path

    folder = Path(path).absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    if not os.access(folder, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))


def write_lines(path: str | None, out: list[str]) -> None:
    if path is None:
        sys.stdout.writelines(out)
        sys.stdout.flush()
        return
    from pathlib import Path

    from aiayn.io import atomic_write

    with atomic_write(Path(path)) as tmp:
        tmp.write_text("".join(out), encoding="utf-8")
