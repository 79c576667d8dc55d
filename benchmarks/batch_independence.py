"""Does each sentence get the search it would get alone? Sentences translated one at a time against the same
sentences in one continuous beam search (what `aiayn serve` runs: requests join and leave the running
search), per decoder arithmetic: how many outputs are identical.

In fp32 the promise holds exactly (the tests check it). In bf16 and int8 the matrix products round
differently with the shape of the batch they run in (how many rows, which kernel blocking), and a beam
search that is a near tie between two hypotheses can take the other branch: this measures how often.

    python benchmarks/batch_independence.py runs/multi30k-de-en/model --src ../shared/data/multi30k/val.de.gz \\
        [--sentences 100] [--arithmetic fp32 bf16 int8] [--json]
"""

from __future__ import annotations

import argparse
import time

from _common import add_common_arguments, emit_json, format_table, set_threads

from aiayn.commands.door import read_lines
from aiayn.tasks import load_pipeline

OPTIONS = {"fp32": {}, "bf16": {"precision": "bf16"}, "int8": {"quantize": "int8"}}


def concurrently(pipeline, sources: list[str]) -> list[str]:
    """All of `sources` in one continuous search, each its own request, as the server's batcher adds them."""
    session = pipeline.session()
    for i, source in enumerate(sources):
        session.add(i, [source])
    out: dict[int, str] = {}
    while len(out) < len(sources):
        for request, results in session.step():
            out[request] = results[0]
    return [out[i] for i in range(len(sources))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a translation model directory")
    p.add_argument("--src", required=True, help="source sentences, one a line (.gz read too)")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--arithmetic", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    add_common_arguments(p)
    args = p.parse_args()
    set_threads(args.threads)
    sources = [s for s in read_lines(args.src) if s.strip()][: args.sentences]
    rows = []
    for name in args.arithmetic:
        pipeline = load_pipeline(args.model, **OPTIONS[name])
        start = time.perf_counter()
        alone = [pipeline([s])[0] for s in sources]
        together = concurrently(pipeline, sources)
        same = sum(a == b for a, b in zip(alone, together))
        rows.append({"arithmetic": name, "sentences": len(sources), "identical": same,
                     "share": 100.0 * same / len(sources), "seconds": time.perf_counter() - start})
    print(f"{args.model}: {len(sources)} sentences of {args.src} translated alone and in one continuous search")
    print(format_table(rows, [("arithmetic", "arithmetic", ""), ("sentences", "sentences", ","),
                              ("identical", "identical", ","), ("share", "identical %", ".1f"),
                              ("seconds", "seconds", ".1f")]))
    if args.json:
        emit_json({"model": args.model, "rows": rows})


if __name__ == "__main__":
    main()
