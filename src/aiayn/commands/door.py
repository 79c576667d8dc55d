"""What the commands that answer with a model share: the model directory's pipeline (its one
inference door, `aiayn.tasks.load_pipeline`), lines in and lines out, and a progress bar.

Input lines end at "\n" only (a CRLF line loses its "\r"; a bare "\r" inside a line is part of
it), and invalid UTF-8 is replaced by U+FFFD, from a file (`-i`, `.gz` read too) and from stdin
alike, so there is one output line per input line and no output line contains a line break.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from itertools import islice
from typing import Callable, Iterator, Optional, Sequence

from aiayn.commands.lines import line_format

STDIN_CHUNK = 2000  # lines answered (and written) together when reading a pipe


TWICE = "_model_given_twice"  # set on the namespace; `aiayn.cli.main` refuses it after any unknown option


class _ModelDir(argparse.Action):
    """Stores the model directory and notes a second one (MODEL and --model both given). The note, not an
    error here: the value of an unknown option (`--bogus x`) reads as a MODEL too, and the unknown option
    is the error to name."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            setattr(namespace, TWICE, True)
        setattr(namespace, self.dest, values)


class _ModelDirs(argparse.Action):
    """Collects model directories given as MODEL ... and as --model MODEL (repeatable), in order."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = values if isinstance(values, list) else [values]
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), *given])


def whole_number(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` (to `high`); a usage error naming the flag otherwise."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {f'from {low} to {high}' if high else f'at least {low}'}, "
                                             f"got {value}")
        return value
    return whole


def add_model_dirs_argument(p: argparse.ArgumentParser, help: str) -> None:
    """One or more model directories (`aiayn serve`), as bare MODEL ... and/or as --model MODEL, repeated."""
    p.add_argument("model", nargs="*", default=[], action=_ModelDirs, metavar="MODEL", help=help)
    p.add_argument("--model", dest="model", action=_ModelDirs, metavar="MODEL", help="the same as MODEL (repeatable)")


def add_model_argument(p: argparse.ArgumentParser, help: str) -> None:
    """The model directory, as a bare MODEL or as --model MODEL: either form on every command that
    answers with a model. Neither is an error when the model is loaded (`load`)."""
    p.add_argument("model", nargs="?", default=argparse.SUPPRESS, action=_ModelDir, metavar="MODEL", help=help)
    p.add_argument("--model", dest="model", action=_ModelDir, metavar="MODEL", help="the same as MODEL")


def add_device_argument(p) -> None:
    """--device of every command that runs a model. Unset it is None (`device`), so that a command that runs
    none after all (evaluate --hyp) can tell it was given."""
    from aiayn.runtime import DEVICES_HELP
    from aiayn.training.config import RunConfig

    p.add_argument("--device", help=f"torch device: {DEVICES_HELP} (default: {RunConfig.device})")


def device(args, quantize: str | None = None):
    """The torch device of --device (`RunConfig.device` when unset), as `runtime.inference_device` picks it."""
    from aiayn.runtime import inference_device
    from aiayn.training.config import RunConfig

    return inference_device(args.device or RunConfig.device, quantize)


def load(args, own_command: bool = False, **options):
    """The pipeline of `args.model` on `args.device`. With `own_command`, a model whose task another
    command answers for is a one-line error naming that command (before the model is loaded)."""
    from aiayn.tasks import task_class, task_of

    if args.model is None:
        raise ValueError(f"no model directory: aiayn {args.command} MODEL ... (or --model MODEL)")
    task, command = task_of(args.model), args.command
    fits = task_class(task).pipeline.command
    if own_command and fits != command:
        hint = f"use `aiayn {fits}`" if fits else "it has no inference command"
        raise ValueError(f"{args.model}: a {task} model, which `aiayn {command}` does not run; {hint}")
    from aiayn.runtime import flush_denormals
    from aiayn.tasks import load_pipeline

    flush_denormals()  # before torch's first parallel op: see its docstring
    return load_pipeline(args.model, device=device(args, options.get("quantize")), **options)


def read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 file (`.gz` decompressed, invalid bytes replaced), split on "\n" only; see `chomp`."""
    from aiayn.data.corpus import read_text_file

    lines = read_text_file(path, errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line
    return [chomp(line) for line in lines]


def text_argument(value: str) -> str:
    """A command-line text (argparse `type=`) read the way `read_lines` reads a file: bytes that are not
    UTF-8, which Python keeps as lone surrogates, replaced (a tokenizer cannot take a surrogate)."""
    import os

    return os.fsencode(value).decode("utf-8", errors="replace")


def chomp(line: str) -> str:
    """`line` without its "\n" and, for a CRLF line end, the "\r" before it. Text opened with
    newline="\n" splits on "\n" alone; the default (universal newlines) would split at a bare "\r"."""
    return line.removesuffix("\n").removesuffix("\r")


def stdin_lines():
    """stdin as text the way `read_lines` reads a file: UTF-8 (a BOM dropped) with invalid bytes replaced,
    "\n" ends a line."""
    import io

    return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", errors="replace", newline="\n")  # a BOM dropped


def parse(pipeline, lines: list[str], where: str, first: int = 0) -> list:
    """Inputs of `lines` by the pipeline's line format; a bad line is an error naming `where` and its number."""
    read, inputs = line_format(pipeline).parse, []
    for number, line in enumerate(lines, start=first + 1):
        try:
            inputs.append(read(line))
        except ValueError as e:
            raise ValueError(f"{where}:{number}: {e}") from None
    return inputs


@contextlib.contextmanager
def line_progress(total: Optional[int] = None, disable: bool = False) -> Iterator[Callable[[int], None]]:
    """A progress callback counting lines on stderr. The bar is drawn at the first line done, so that an
    error found before any decoding (a bad setting) is the only thing the user sees."""
    from tqdm import tqdm

    bar = None

    def update(n: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="line", file=sys.stderr, dynamic_ncols=True, disable=disable)
        bar.update(n)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()


def answer(pipeline, inputs: list, options: dict) -> list:
    """`pipeline(inputs, **options)` under a progress bar on stderr."""
    with line_progress(len(inputs)) as progress:
        return pipeline(inputs, progress=progress, **options)


def run_lines(args, pipeline, options: dict, format_line: Optional[Callable] = None,
              index_option: Optional[str] = None) -> int:
    """-i FILE (or stdin, streamed in chunks) -> -o FILE (or stdout): one output line per input line.
    `format_line(index, input, output)` replaces the pipeline's line format; `index_option` names the
    option that tells the pipeline the line number of a chunk's first line (seeded sampling)."""
    write = line_format(pipeline).write
    fmt = format_line or (lambda i, given, out: write(pipeline, given, out))
    if args.input not in (None, "-"):  # -i - is stdin, as -o - is stdout
        inputs = parse(pipeline, read_lines(args.input), args.input)
        outputs = answer(pipeline, inputs, options)
        write_lines(args.output, [fmt(i, x, y) + "\n" for i, (x, y) in enumerate(zip(inputs, outputs))])
        return 0
    from aiayn.io import output_file

    stdin = stdin_lines()
    chunk = 1 if stdin.isatty() else STDIN_CHUNK
    with output_file("-" if args.output is None else args.output) as sink, \
            line_progress(disable=stdin.isatty()) as progress:  # a count: the total is unknown
        done = 0
        while lines := [chomp(line) for line in islice(stdin, chunk)]:
            inputs = parse(pipeline, lines, "<stdin>", done)
            outputs = pipeline(inputs, progress=progress, **options, **({index_option: done} if index_option else {}))
            sink.writelines(fmt(done + i, x, y) + "\n" for i, (x, y) in enumerate(zip(inputs, outputs)))
            sink.flush()
            done += len(lines)
    return 0


def write_lines(path: str | None, out: list[str]) -> None:
    """`out` to `path` (None or "-": stdout); see `aiayn.io.write_output` for links, FIFOs and devices."""
    from aiayn.io import write_output

    write_output("-" if path is None else path, "".join(out))


def check_writable(path: str, inputs: Sequence[str | None] = ()) -> None:
    """Fail before answering, not after, when `path` cannot be written: it is one of the `inputs` (a slip
    of -o would replace what is read), a directory, or its nearest existing folder is a file or not
    writable. The error names that path or folder."""
    import errno
    import os
    from pathlib import Path

    from aiayn.io import named_fd

    if named_fd(path) is not None:  # an open file of this process (/dev/stdout): written as it is
        return
    if not str(path):
        raise ValueError("the output path is empty")
    if str(path).endswith(os.sep) and not Path(path).is_dir():  # "out/": a folder meant, not a file "out"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    for given in inputs:
        if given not in (None, "-") and Path(path).exists() and Path(given).exists() and os.path.samefile(path, given):
            raise ValueError(f"{path}: is also an input ({given}); write the output somewhere else")
    if Path(path).is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    folder = Path(path).absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    if not os.access(folder, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
