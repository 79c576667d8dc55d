"""The `aiayn` command. Each subcommand lives in `aiayn.commands.<name>` and provides
`HELP`, `add_arguments(parser)` and `run(args) -> int`; heavy imports stay inside `run`.

Exit codes: 0 done; 2 an expected failure (bad input or flags, a missing or unwritable
file, a full disk, a run directory locked by another process, a failed torch save or
load), reported as one line `aiayn <command>: error: ...` on stderr, with the traceback
only under -v; 130 interrupted (Ctrl-C); 141 stdout closed by its reader
(`aiayn translate ... | head -1`): output stops quietly, as for a program killed by
SIGPIPE, whose exit status a shell reports as 128 + 13 = 141.
"""

from __future__ import annotations

import argparse
import importlib
import keyword
import logging
import os
import sys

COMMANDS = ("demo", "params", "prepare", "train", "average", "translate", "summarize", "answer", "generate", "classify", "embed", "serve", "import", "export", "evaluate", "plot")

# Failures a user can cause and fix. OSError: missing, unreadable or unwritable paths, a full
# disk. ValueError: bad flags, configs (aiayn.config.ConfigError) and inputs. RuntimeError:
# torch.save/torch.load failures and aiayn.io.LockedError (a run in use by another process).
EXPECTED_ERRORS = (OSError, ValueError, RuntimeError)
EXIT_ERROR, EXIT_INTERRUPTED, EXIT_STDOUT_CLOSED = 2, 130, 141


def build_parser() -> argparse.ArgumentParser:
    from aiayn import __version__

    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging; tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"aiayn.commands.{name}{'_' if keyword.iskeyword(name) else ''}")  # import_
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    logging.basicConfig(level=log_level(args.verbose, os.environ.get("RANK", "0")),
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # before OSError, of which it is one
        return _stdout_closed()
    except EXPECTED_ERRORS as e:
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {error_message(e)}", file=sys.stderr)
        return EXIT_ERROR


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, an unknown option named before a model directory given twice (`commands.door`):
    in `--model M --bogus x`, x reads as a second MODEL."""
    from aiayn.commands.door import TWICE

    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, TWICE, False):
        parser.error("the model directory is given twice (MODEL and --model): give it once")
    return args


def log_level(verbose: bool, rank: str) -> int:
    """DEBUG with -v; else INFO on torchrun's rank 0 (or without torchrun) and WARNING on the other
    ranks, whose INFO lines would repeat rank 0's (fairseq logs the same way)."""
    if verbose:
        return logging.DEBUG
    return logging.INFO if rank == "0" else logging.WARNING


def error_message(e: BaseException) -> str:
    """One line: an OSError as 'path: reason' (not '[Errno 13] ...'), anything else as str(e)."""
    if isinstance(e, OSError) and e.strerror:
        paths = " -> ".join(str(p) for p in (e.filename, e.filename2) if p is not None)
        message = f"{paths}: {e.strerror}" if paths else e.strerror
    else:
        message = str(e) or type(e).__name__
    return " ".join(message.splitlines())


def _stdout_closed() -> int:
    """The reader of stdout has gone. Point stdout at /dev/null so that the interpreter's final
    flush cannot fail again (the recipe of Python's docs, "Note on SIGPIPE"), and stop quietly."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return EXIT_STDOUT_CLOSED  # not a real file (a test's capture): nothing flushes it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return EXIT_STDOUT_CLOSED
