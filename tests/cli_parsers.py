"""The argparse parser of one `aiayn` subcommand (or a sub-subcommand: `subcommand("plot", "mask")`), for
tests that read a flag's default or help text."""

import argparse

from aiayn.cli import build_parser


def subcommand(*names: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in names:
        parser = parser._subparsers._group_actions[0].choices[name]  # argparse keeps its subparsers here
    return parser
