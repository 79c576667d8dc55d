"""The candidates for aiayn's int8 (and bf16) linear layers, timed on the shapes of a decoding step.

Each row is one linear layer y = x W^T + b of the `small` preset (d_model 256, d_ff 1024, an
8000-token vocabulary) or, with `--size opus`, of opus-mt's shape (512, 2048, 58,101 ids), at the row
counts of decode_speed's cells: 1 (greedy, batch 1), 4 (beam 4, batch 1), 32 and 128 (beam 4, batch 32).
Microseconds per call (median of --runs blocks of --calls calls), 2 threads; the ratio columns divide
fp32 by each candidate:

    fp32        aiayn's fp32 path on the model's own (out, in) weight (`fast_decoder._affine`: F.linear
                below MANY_ROWS rows, (W xᵀ)ᵀ from there on)
    fp32_t      torch.addmm on a transposed (in, out) copy: the layout FastDecoder kept before, at the
                cost of a second copy of every matrix
    bf16        the same in bf16 (native only with avx512_bf16 or AMX)
    fbgemm      torch.ops.quantized.linear_dynamic: FBGEMM's fused dynamic int8 linear, what torch.ao's
                dynamic quantization runs; activations quantized with one scale for the whole batch
    int8_rows   aiayn's Int8Linear below PACKED_OUT outputs: activations quantized per row, torch._int_mm
                on the codes (which it repacks at every call), rescaled in place
    int8_packed the same arithmetic and bits on oneDNN's quantized linear with the weights packed once,
                fewer than MIN_ROWS rows padded: what Int8Linear runs from PACKED_OUT outputs on
    int8_unpadded the same with the rows as they come: oneDNN's slow path for a few rows at some shapes
    w8_only     torch._weight_int8pack_mm: int8 weights, fp32 activations (timed up to 4 rows only: at
                32 rows it was already 20x slower than fp32)

`aiayn.modules.quantized` explains the choice: activations quantized per row (int8_rows, and int8_packed
for an output projection), because a row's result must not depend on the other rows of its batch, which
fbgemm's per-batch scale breaks.

    .venv/bin/python benchmarks/int8_matmul.py [--size small|opus] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_common_arguments, emit_json, format_table, set_threads  # noqa: E402

from aiayn.models.fast_decoder import _affine  # noqa: E402
from aiayn.modules.quantized import Int8Linear, prepack  # noqa: E402

SIZES = {  # (in, out) of each layer
    "small": {"qkv": (256, 768), "ff1": (256, 1024), "ff2": (1024, 256), "output": (256, 8000)},
    "opus": {"qkv": (512, 1536), "ff1": (512, 2048), "ff2": (2048, 512), "output": (512, 58101)},
}
ROWS = (1, 4, 32, 128)
CANDIDATES = ("fp32", "fp32_t", "bf16", "fbgemm", "int8_rows", "int8_packed", "int8_unpadded", "w8_only")


def candidates(weight: torch.Tensor, bias: torch.Tensor) -> dict:
    """name -> x (M, in) -> (M, out)."""
    wt = weight.t().contiguous()
    wt16, b16 = wt.bfloat16(), bias.bfloat16()
    rows = Int8Linear(weight, bias, keep_rows=True)
    rows.packed = None  # torch._int_mm on the codes
    packed = Int8Linear(weight, bias, keep_rows=True)
    packed.packed = prepack(packed.rows.codes)  # oneDNN's packed weights, whatever the layer's size
    unpadded = Int8Linear(weight, bias)
    unpadded.packed, unpadded.min_rows = packed.packed, 1  # the same, the rows as they come
    scale = (weight.abs().amax(1) / 127).clamp(min=1e-12)
    q = torch.round(weight / scale[:, None]).to(torch.int8)  # (out, in)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's quantized tensors are deprecated (see the module doc)
        qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0)
        fbgemm = torch.ops.quantized.linear_prepack(qw, bias)
    return {
        "fp32": lambda x: _affine(x, weight, bias),
        "fp32_t": lambda x: torch.addmm(bias, x, wt),
        "bf16": lambda x: torch.addmm(b16, x.bfloat16(), wt16),
        "fbgemm": lambda x: torch.ops.quantized.linear_dynamic(x, fbgemm, False),
        "int8_rows": rows,
        "int8_packed": packed,
        "int8_unpadded": unpadded,
        "w8_only": lambda x: torch._weight_int8pack_mm(x, q, scale) + bias,
    }


def time_us(fn, x: torch.Tensor, runs: int, calls: int) -> float:
    fn(x)
    blocks = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        blocks.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(blocks)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="timed blocks per cell; the median is reported")
    p.add_argument("--calls", type=int, default=50, help="calls per block")
    p.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    p.add_argument("--size", choices=list(SIZES), default="small", help="the layers' shapes (default: small)")
    add_common_arguments(p)
    args = p.parse_args(argv)
    threads = set_threads(args.threads if args.threads is not None else 2)
    torch.manual_seed(0)
    table = []
    for layer, (n_in, n_out) in SIZES[args.size].items():
        weight, bias = torch.randn(n_out, n_in) * n_in ** -0.5, torch.randn(n_out) * 0.1
        fns = candidates(weight, bias)
        for m in args.rows:
            x = torch.randn(m, n_in)
            row = {"layer": layer, "rows": m, **{name: time_us(fn, x, args.runs, args.calls) for name, fn in fns.items()
                                                 if name != "w8_only" or m <= 4}}
            row.update({f"fp32/{name}": row["fp32"] / row[name] for name in CANDIDATES[1:] if name in row})
            table.append(row)
    columns = [("layer", "layer", ""), ("rows", "rows", "d")] + [(n, n + " us", ".1f") for n in CANDIDATES]
    columns += [(f"fp32/{n}", f"fp32/{n}", ".2f") for n in CANDIDATES[1:]]
    print(f"linear layers, {threads} threads, microseconds per call")
    print(format_table(table, columns))
    if args.json:
        emit_json({"threads": threads, "rows": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                                                for r in table]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
