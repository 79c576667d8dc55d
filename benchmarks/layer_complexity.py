"""Table 1 of the paper, measured: one layer's forward + backward on this machine, for the same
width d and sequence lengths n = 16 .. 1,024.

    layer                  complexity   sequential ops   max path length   (Table 1)
    self-attention         O(n²·d)      O(1)             O(1)
    recurrent (GRU)        O(n·d²)      O(n)             O(n)
    convolution, kernel k  O(k·n·d²)    O(1)             O(n/k) (contiguous kernels; O(log_k n) dilated)
    restricted attention   O(r·n·d)     O(1)             O(n/r)

The layers are the real ones: our `MultiHeadAttention` (8 heads, Q/K/V/O projections
included, fused SDPA), `torch.nn.GRU`, `torch.nn.Conv1d` (kernel k, same padding), and
attention restricted to a window of r keys around each query, computed on unfolded windows
(so it does O(r·n·d) work, not a masked O(n²·d)). FLOPs are counted by hand for the
matrix products of one forward (2 per multiply-add), times 3 for forward + backward; the
projections that every layer has (attention's four d×d maps) are included, so the n²
term shows only when n passes about d. Time is the median of --runs forward+backward passes
of a batch of --batch sequences, torch.set_num_threads(--threads).

    .venv/bin/python benchmarks/layer_complexity.py [--d 256 512] [--n 16 64 256 1024] [--json]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_arguments, emit_json, format_table, median, set_threads, time_call  # noqa: E402

from aiayn.modules.attention import MultiHeadAttention  # noqa: E402

HEADS = 8


class RestrictedAttention(nn.Module):
    """Self-attention of each query over the r keys centred on it (§4, "restricted")."""

    def __init__(self, d: int, r: int):
        super().__init__()
        self.mha, self.r = MultiHeadAttention(d, HEADS), r

    def forward(self, x: Tensor) -> Tensor:
        B, n, d = x.shape
        q, k, v = self.mha.project_qkv(x)  # 3 x (B, H, n, Dh)
        pad = self.r // 2
        windows = lambda t: F.pad(t, (0, 0, pad, self.r - 1 - pad)).unfold(2, self.r, 1)  # noqa: E731  (B, H, n, Dh, r)
        kw, vw = windows(k), windows(v)
        scores = torch.einsum("bhnd,bhndr->bhnr", q, kw) / math.sqrt(q.shape[-1])  # (B, H, n, r)
        out = torch.einsum("bhnr,bhndr->bhnd", scores.softmax(-1), vw)  # (B, H, n, Dh)
        return self.mha.out_proj(out.transpose(1, 2).reshape(B, n, d))


class Conv(nn.Module):
    def __init__(self, d: int, k: int):
        super().__init__()
        self.conv = nn.Conv1d(d, d, k, padding=k // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)[:, : x.shape[1]]


class SelfAttention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.mha = MultiHeadAttention(d, HEADS)

    def forward(self, x: Tensor) -> Tensor:
        return self.mha(x)[0]


class Recurrent(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.gru = nn.GRU(d, d, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.gru(x)[0]


def layers(d: int, k: int, r: int) -> dict:
    """name -> (module, forward FLOPs(n), sequential ops(n), max path length(n))."""
    proj = lambda n: 2 * 4 * n * d * d  # noqa: E731  Q, K, V, O
    return {
        "self-attention": (SelfAttention(d), lambda n: proj(n) + 2 * 2 * n * n * d, lambda n: 1, lambda n: 1),
        "recurrent (GRU)": (Recurrent(d), lambda n: 2 * 2 * 3 * n * d * d, lambda n: n, lambda n: n),
        f"conv k={k}": (Conv(d, k), lambda n: 2 * k * n * d * d, lambda n: 1, lambda n: math.ceil(n / (k - 1))),
        f"restricted r={r}": (RestrictedAttention(d, r), lambda n: proj(n) + 2 * 2 * n * r * d, lambda n: 1,
                              lambda n: math.ceil(n / (r // 2))),
    }


def measure(module: nn.Module, d: int, n: int, batch: int, runs: int) -> float:
    x = torch.randn(batch, n, d, requires_grad=True)

    def step():
        module.zero_grad(set_to_none=True)
        module(x).sum().backward()

    step()  # warm-up
    return median([time_call(step) for _ in range(runs)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d", type=int, nargs="+", default=[256, 512], help="layer widths (default: 256 512)")
    p.add_argument("--n", type=int, nargs="+", default=[16, 64, 256, 1024], help="sequence lengths")
    p.add_argument("--k", type=int, default=3, help="convolution kernel width (default: 3)")
    p.add_argument("--r", type=int, default=16, help="restricted attention window (default: 16)")
    p.add_argument("--batch", type=int, default=8, help="sequences per pass (default: 8)")
    p.add_argument("--runs", type=int, default=5, help="timed passes per cell; the median is reported")
    add_common_arguments(p)
    args = p.parse_args(argv)
    threads = set_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for d in args.d:
        for name, (module, flops, sequential, path) in layers(d, args.k, args.r).items():
            for n in args.n:
                seconds = measure(module, d, n, args.batch, args.runs)
                fl = 3 * args.batch * flops(n)
                rows.append({"layer": name, "d": d, "n": n, "ms": 1e3 * seconds, "gflop": fl / 1e9,
                             "gflop_s": fl / seconds / 1e9, "sequential": sequential(n), "path": path(n)})
    print(f"threads {threads}, batch {args.batch}, forward + backward of one layer, median of {args.runs}")
    print(format_table(rows, [("layer", "layer", ""), ("d", "d", ""), ("n", "n", ""), ("ms", "ms", ",.2f"),
                              ("gflop", "GFLOP", ",.3f"), ("gflop_s", "GFLOP/s", ",.1f"),
                              ("sequential", "sequential ops", ""), ("path", "max path", "")]))
    if args.json:
        emit_json({"threads": threads, "batch": args.batch, "k": args.k, "r": args.r, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
