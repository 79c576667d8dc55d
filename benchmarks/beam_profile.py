"""Where a beam-search step's time goes (issue 29: measure before changing): torch.profiler's self
CPU time of every op of `beam_search`, summed into kinds, per decoding step, at batch 1 and 32.

The model and inputs are decode_speed.py's (`--size`: the `small` preset by default, or opus, base,
big; untrained seeded weights, 30-token sources, exactly the size's output length, beam 4), loaded
from a saved model directory and decoded through the FastDecoder as aiayn does, with denormals
flushed as aiayn's commands flush them. The op kinds (`KINDS`, matched on the op name):

    matmul     the projections, the output layer and the attention products (addmm, mm, bmm, SDPA)
    softmax    log-softmax over the vocabulary
    topk       top-k over beam x vocabulary (and any sort)
    cache      moving rows: index_select, gather, copy_, cat, the cache's reorder
    other      everything else the profiler saw (elementwise ops, masks, bookkeeping in ATen)
    python     wall time minus all of the above: the interpreter between ops (and the
               profiler's own cost per op, so read it as an upper bound)

On CUDA (`--device cuda`) the op list holds the CUDA runtime's calls too (cudaLaunchKernel: the cost
of each kernel launch on the host); benchmarks/beam_syncs.py gives the GPU's side of a step.

    .venv/bin/python benchmarks/beam_profile.py [--size small|opus|base|big] [--batch 1 32] [--runs 3] [--top N] [--json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from aiayn.decoding import for_inference
from aiayn.models import fast_decoder, load_model
from aiayn.runtime import flush_denormals
from _common import emit_json
from decode_speed import BEAM, SIZES, model_dir, ours, sources

KINDS = {  # kind -> substrings of the ATen op names it takes (first match wins, in this order)
    "matmul": ("addmm", "aten::mm", "bmm", "matmul", "linear", "scaled_dot_product", "baddbmm", "_int_mm"),
    "softmax": ("softmax",),
    "topk": ("topk", "sort"),
    "cache": ("index_select", "gather", "copy_", "aten::cat", "index_put", "index_copy", "scatter"),
}
ORDER = (*KINDS, "other", "python")


def kind_of(name: str) -> str:
    return next((kind for kind, keys in KINDS.items() if any(k in name for k in keys)), "other")


def profile_beam(decoder, src: torch.Tensor, runs: int, out_len: int) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Host milliseconds per decoding step of each kind (the mean over `runs` searches, after one
    warm-up), and of each op, most first. On CUDA the ops include the runtime's calls (kernel
    launches, copies) and "python" also holds the host's waits for the GPU."""
    search = lambda: ours(decoder, src, BEAM, out_len)  # noqa: E731
    cuda = src.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode():
        search()
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(runs):
                search()
            if cuda:
                torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - start) * 1e3
    per_kind: dict[str, float] = defaultdict(float)
    steps = runs * out_len
    ops = sorted(((e.key, e.self_cpu_time_total / 1e3 / steps) for e in prof.key_averages()), key=lambda o: -o[1])
    for name, ms in ops:
        per_kind[kind_of(name)] += ms
    per_kind["python"] = max(0.0, wall_ms / steps - sum(per_kind.values()))
    return {kind: per_kind.get(kind, 0.0) for kind in ORDER}, ops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--runs", type=int, default=3, help="profiled searches per batch size (after one warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", default="small", choices=list(SIZES), help="decode_speed.py's model sizes (default: small)")
    p.add_argument("--preset", help="another preset at --size small (tiny for a smoke test)")
    p.add_argument("--cache", type=Path, help="keep the model directory here (made once) instead of a temporary one")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"], help="the decoder's arithmetic")
    p.add_argument("--top", type=int, default=0, help="also print the N ops with the most self time")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--keep-denormals", action="store_true",
                   help="compute with denormal floats (FastDecoder flushes them: see runtime.flush_denormals)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.keep_denormals:  # the decoder as it was before it flushed them
        fast_decoder.flush_denormals = lambda: None
    else:
        flush_denormals()
    size = SIZES[args.size]
    size = type(size)(args.preset, size.vocab, size.out_len) if args.preset else size
    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(model_dir(size, args.cache or Path(tmp)), args.device)
    decoder = for_inference(model, args.precision)
    profiles = {b: profile_beam(decoder, sources(b, size.vocab).to(args.device), args.runs, size.out_len)
                for b in args.batch}
    rows = {b: kinds for b, (kinds, _) in profiles.items()}
    print(f"beam {BEAM}, {size.out_len} steps, {args.size} ({size.preset} preset, {size.vocab:,} ids), {args.precision}, {args.device}, {args.threads} "
          "threads: host ms per step (share)")
    print(f"{'kind':<10}" + "".join(f"{'batch ' + str(b):>20}" for b in args.batch))
    for kind in (*ORDER, "total"):
        cells = []
        for b in args.batch:
            total = sum(rows[b].values())
            value = total if kind == "total" else rows[b][kind]
            cells.append(f"{value:>11.3f} ({100 * value / total:>4.1f}%)")
        print(f"{kind:<10}" + "".join(f"{c:>20}" for c in cells))
    for b, (_, ops) in profiles.items():
        if args.top:
            print(f"\nbatch {b}, the {args.top} ops with the most self time (ms per step):")
            print("\n".join(f"  {ms:8.3f}  {name}" for name, ms in ops[: args.top]))
    if args.json:
        emit_json({"beam": BEAM, "steps": size.out_len, "size": args.size, "preset": size.preset, "threads": args.threads,
                   "device": args.device, "ms_per_step": {str(b): {k: round(v, 4) for k, v in r.items()} for b, r in rows.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
