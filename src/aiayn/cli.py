"""The `aiayn` command. Each subcommand lives in `aiayn.commands.<name>` and provides
`HELP`, `add_arguments(parser)` and `run(args) -> int`; heavy imports stay inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS = ("demo", "params", "prepare", "train", "average", "translate", "evaluate", "plot")


def build_parser() -> argparse.ArgumentParser:
    from aiayn import __version__

    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"aiayn.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError) as e:  # user-facing input errors: no traceback
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2
