"""The label-smoothed loss, forward + backward: ours against PyTorch's and autograd's.

One call = loss on (N, V) logits, then backward to the logits, as in a training step.
Peers, all on the same logits and targets, interleaved call by call:

- ours: `aiayn.tasks.loss.label_smoothed_loss` (logsumexp forward, hand-written
  softmax - q backward);
- autograd: the same loss written as log_softmax, gather and a masked sum, differentiated
  by autograd (what `tasks/loss.py` did before);
- torch: `F.cross_entropy(label_smoothing=ε, ignore_index=pad, reduction="sum")`, which
  spreads ε over all V classes, pad included (a slightly different q, same cost class).

Default shape: N = 2,900 target positions, V = 8,000, about one Multi30k update of
`recipes/multi30k-de-en.toml` (6,000 padded tokens, joint 8k BPE).

    .venv/bin/python benchmarks/loss.py
    .venv/bin/python benchmarks/loss.py --rows 512 --vocab 32000 --json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_arguments, emit_json, format_table, median, set_threads, time_call  # noqa: E402

from aiayn.config import PAD_ID, OptimConfig  # noqa: E402
from aiayn.tasks.loss import label_smoothed_loss  # noqa: E402

EPS = OptimConfig().label_smoothing


def autograd_loss(logits: Tensor, target: Tensor) -> Tensor:
    """The same smoothed loss as ours, left to autograd."""
    V = logits.shape[-1]
    lprobs = F.log_softmax(logits, dim=-1)  # (N, V)
    keep = target != PAD_ID  # (N,)
    lprobs, gold = lprobs[keep], target[keep]
    nll = -lprobs.gather(1, gold.unsqueeze(1)).squeeze(1)
    uniform = -(lprobs.sum(-1) - lprobs[:, PAD_ID])
    return ((1 - EPS) * nll + EPS / (V - 1) * uniform).sum()


PEERS = {
    "ours": lambda z, y: label_smoothed_loss(z, y, EPS, PAD_ID).loss,
    "autograd": autograd_loss,
    "torch": lambda z, y: F.cross_entropy(z, y, ignore_index=PAD_ID, label_smoothing=EPS, reduction="sum"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2900, help="target positions N (default: 2900)")
    p.add_argument("--vocab", type=int, default=8000, help="vocabulary V (default: 8000)")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per peer (default: 7)")
    add_common_arguments(p)
    args = p.parse_args(argv)
    threads = set_threads(args.threads)

    torch.manual_seed(0)
    logits = torch.randn(args.rows, args.vocab) * 3
    target = torch.randint(1, args.vocab, (args.rows,))
    target[::20] = PAD_ID  # ~5% padding, as in bucketed batches

    def call(fn):
        z = logits.clone().requires_grad_()
        fn(z, target).backward()

    seconds = {name: [] for name in PEERS}
    for name, fn in PEERS.items():
        call(fn)  # warm-up
    for _ in range(args.repeats):
        for name, fn in PEERS.items():
            seconds[name].append(time_call(lambda: call(fn)))
    ours = median(seconds["ours"])
    rows = [{"peer": name, "ms": 1000 * median(s), "speedup": median(s) / ours} for name, s in seconds.items()]
    print(f"label-smoothed loss, forward + backward, N={args.rows}, V={args.vocab}, {threads} threads")
    print(format_table(rows, [("peer", "peer", ""), ("ms", "ms (median)", ".1f"), ("speedup", "ours is x faster", ".2f")]))
    if args.json:
        emit_json({"rows_n": args.rows, "vocab": args.vocab, "threads": threads,
                   **{f"{r['peer']}_ms": r["ms"] for r in rows}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
