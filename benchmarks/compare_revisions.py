"""Did a change make something slower? One benchmark of this repository, run alternately on this
checkout and on another checkout (e.g. the previous main in a `git worktree`), on one machine in
one sitting: A B A B ..., so load on a shared machine hits both alike.

    git worktree add /tmp/prev-main origin/main   # or any revision
    .venv/bin/python benchmarks/compare_revisions.py --other /tmp/prev-main --rounds 3 \\
        -- benchmarks/decode_speed.py --skip textbook hf ct2_fp32 ct2_int8 --runs 5

The benchmark must accept --json and print its rows as {"rows": [...]} on its last line (as
decode_speed.py does); each is run from its own checkout with that checkout's `src` first on
PYTHONPATH. The table gives, per row and number, the median over rounds of each revision and
their ratio (this / other).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import emit_json

HERE = Path(__file__).resolve().parents[1]


def run_once(checkout: Path, command: list[str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    out = subprocess.run([sys.executable, *command, "--json"], cwd=checkout, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["rows"]


def key(row: dict) -> tuple:
    """What names a row: its fields that are not numbers."""
    return tuple((k, v) for k, v in row.items() if v is not None and not isinstance(v, float))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", required=True, type=Path, help="the other checkout (a worktree of another revision)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each revision, alternating (default 3)")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the benchmark script and its arguments")
    args = p.parse_args(argv)
    command = [c for c in args.command if c != "--"]
    if not command:
        p.error("give the benchmark after --")
    results: dict[str, list[list[dict]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        for name, checkout in (("this", HERE), ("other", args.other.resolve())):
            print(f"round {r + 1}/{args.rounds}: {name} ({checkout})", file=sys.stderr, flush=True)
            results[name].append(run_once(checkout, command))
    table = []
    for i, row in enumerate(results["this"][0]):
        for field, value in row.items():
            if not isinstance(value, float):
                continue
            this = statistics.median(rounds[i][field] for rounds in results["this"])
            other = statistics.median(rounds[i][field] for rounds in results["other"])
            table.append({**dict(key(row)), "value": field, "this": this, "other": other, "ratio": this / other})
    names = [k for k, _ in key(results["this"][0][0])]
    print("".join(f"{n:<10}" for n in names) + f"{'value':<12}{'this':>12}{'other':>12}{'this/other':>12}")
    for t in table:
        print("".join(f"{str(t[n]):<10}" for n in names)
              + f"{t['value']:<12}{t['this']:>12,.1f}{t['other']:>12,.1f}{t['ratio']:>12.3f}")
    if args.json:
        emit_json({"rounds": args.rounds, "other": str(args.other), "rows": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
