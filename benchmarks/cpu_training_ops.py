"""Three pieces of a training update on a CPU, forward + backward: ours against the PyTorch way.

Peers, on the same inputs, interleaved call by call:

- dropout on a (B, S, D) activation: `aiayn.modules.dropout.dropout` (a 64-bit draw read as four
  16-bit ones) against `F.dropout` (`bernoulli_`, one draw an element);
- attention in bf16 autocast with padding: `aiayn.modules.attention.scaled_dot_product_attention`,
  which takes the explicit matmuls when training in bf16 on a CPU, against torch's fused
  `F.scaled_dot_product_attention`;
- the copy mixture of `model.copy_attention` and the label-smoothed loss on it: ours (the copy term at
  the source ids only, `modules.copy_attention.copy_mixture`) against the dense mixture left to
  autograd (a (K, T, V) copy distribution by scatter_add, softmax, mix, log: what the module did before);
- the same mixture in one beam-search step (forward only, beam 4, sources of 512 tokens), where the
  ids' bookkeeping runs at every step.

Default shapes: one update of `recipes/aeslc-summarization.toml` (146 e-mails, bodies of 32 tokens,
subjects of 10, d_model 256, 4 heads, vocabulary 8,000). `--keep-freed-memory` first calls
`aiayn.runtime.keep_freed_memory()`, as `aiayn train` does; the JSON says which allocator ran.

    .venv/bin/python benchmarks/cpu_training_ops.py
    .venv/bin/python benchmarks/cpu_training_ops.py --keep-freed-memory --json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    add_common_arguments, allocator_name, emit_json, format_table, median, set_threads, time_call,
)

from aiayn.config import PAD_ID  # noqa: E402
from aiayn.modules import masks  # noqa: E402
from aiayn.modules.attention import scaled_dot_product_attention  # noqa: E402
from aiayn.modules.copy_attention import copy_mixture  # noqa: E402
from aiayn.modules.dropout import dropout  # noqa: E402
from aiayn.runtime import keep_freed_memory  # noqa: E402
from aiayn.tasks.loss import label_smoothed_loss  # noqa: E402


def dropout_pair(B, S, T, D, H, V, p=0.2):
    x = torch.randn(B, S, D, dtype=torch.bfloat16, requires_grad=True)
    return {"ours": lambda: dropout(x, p).sum().backward(),
            "torch": lambda: F.dropout(x, p, training=True).sum().backward()}


def attention_pair(B, S, T, D, H, V):
    q, k, v = (torch.randn(B, H, S, D // H, requires_grad=True) for _ in range(3))
    lengths = torch.randint(S // 2, S + 1, (B,))
    mask = masks.key_mask(torch.arange(S)[None, :] < lengths[:, None])  # (B, 1, 1, S)

    def ours():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
        out.float().sum().backward()

    def fused():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=mask)
        out.float().sum().backward()

    return {"ours": ours, "torch": fused}


def copy_pair(B, S, T, D, H, V):
    logits = torch.randn(B, T, V, dtype=torch.bfloat16, requires_grad=True)
    a = torch.softmax(torch.randn(B, T, S), -1).requires_grad_()  # (B, T, S)
    gate = torch.randn(B, T, 1, requires_grad=True)
    src, target = torch.randint(4, V, (B, S)), torch.randint(4, V, (B, T))

    def ours():
        out = copy_mixture(logits, torch.sigmoid(gate), a, src)
        label_smoothed_loss(out, target, 0.1, PAD_ID).loss.backward()

    def dense():
        copied = torch.zeros(B, T, V).scatter_add(-1, src[:, None, :].expand_as(a), a)  # (B, T, V)
        g = torch.sigmoid(gate)
        out = (g * torch.softmax(logits.float(), -1) + (1 - g) * copied).clamp_min(1e-38).log()
        label_smoothed_loss(out, target, 0.1, PAD_ID).loss.backward()

    return {"ours": ours, "torch": dense}


def copy_step_pair(B, S, T, D, H, V, beam=4, source=512):
    """One decoding step of the copy mixture (forward, no grad): B sources x `beam` rows, 512-token sources."""
    K = B * beam
    logits, gate = torch.randn(K, 1, V), torch.randn(K, 1, 1)
    a, src = torch.softmax(torch.randn(K, 1, source), -1), torch.randint(4, V, (K, source))

    @torch.no_grad()
    def ours():
        copy_mixture(logits, torch.sigmoid(gate), a, src)

    @torch.no_grad()
    def dense():
        copied = torch.zeros(K, 1, V).scatter_add(-1, src[:, None, :], a)
        g = torch.sigmoid(gate)
        (g * torch.softmax(logits, -1) + (1 - g) * copied).clamp_min(1e-38).log()

    return {"ours": ours, "torch": dense}


OPS = {"dropout": dropout_pair, "attention bf16": attention_pair, "copy mixture + loss": copy_pair,
       "copy decode step S=512": copy_step_pair}


def _key(op: str) -> str:
    return op.replace(" + ", " and ").replace("=", "").replace(" ", "_")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=146, help="sequences per update (default: 146)")
    p.add_argument("--source", type=int, default=32, help="source length S (default: 32)")
    p.add_argument("--target", type=int, default=10, help="target length T (default: 10)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--repeats", type=int, default=7, help="timed calls per peer (default: 7)")
    p.add_argument("--keep-freed-memory", action="store_true", help="glibc keeps freed memory, as aiayn train sets")
    add_common_arguments(p)
    args = p.parse_args(argv)
    kept = keep_freed_memory() if args.keep_freed_memory else False
    threads = set_threads(args.threads)
    torch.manual_seed(0)
    shape = (args.batch, args.source, args.target, args.d_model, args.heads, args.vocab)
    rows = []
    for op, make in OPS.items():
        calls = make(*shape)
        seconds = {name: [] for name in calls}
        for fn in calls.values():
            fn()  # warm-up
        for _ in range(args.repeats):
            for name, fn in calls.items():
                seconds[name].append(time_call(fn))
        ours, theirs = median(seconds["ours"]), median(seconds["torch"])
        rows.append({"op": op, "ours": 1000 * ours, "torch": 1000 * theirs, "speedup": theirs / ours})
    print(f"forward + backward (the decode step: forward), B={args.batch} S={args.source} T={args.target} D={args.d_model} "
          f"V={args.vocab}, {threads} threads, allocator {allocator_name()}, freed memory kept: {kept}")
    print(format_table(rows, [("op", "op", ""), ("ours", "ours ms", ".1f"), ("torch", "PyTorch way ms", ".1f"),
                              ("speedup", "ours is x faster", ".2f")]))
    if args.json:
        emit_json({"threads": threads, "allocator": allocator_name(), "keep_freed_memory": kept,
                   **{f"{_key(r['op'])}_{k}": r[k] for r in rows
                      for k in ("ours", "torch", "speedup")}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
