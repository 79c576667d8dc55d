"""Per decoding step on CUDA: how often the host waits for the GPU, how many kernels it launches,
and how the step's wall time splits between the host and the GPU (ours greedy, ours beam 4, and
decode_speed.py's textbook beam 4 that recomputes the prefix). Each wait drains the queue of
kernels, so the GPU idles while Python works out the next step; a step whose wall time is well
above its GPU time is bound by the host (Python and kernel launches), not by the GPU.

Waits are counted with torch's sync debug mode (`aiayn.runtime.count_cuda_syncs`), kernels and
their GPU time with torch.profiler, wall time without the profiler (the best of --runs: other load
on the host only slows a run), all on decode_speed.py's model and sources with exactly N tokens
forced (EOS banned before N): the figures of 40 steps minus those of 20, over the 20 steps
between, give the per-step ones; the start (encoder, cache) is the rest. The "EOS allowed" line
counts the waits of a beam search where the untrained model's EOS ends sentences (up to 40
tokens). Where the host's time goes, op by op: `beam_profile.py --device cuda --top N`.

    python benchmarks/beam_syncs.py [--batch 1 32] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from _common import emit_json, format_table, time_call
from decode_speed import BEAM, build_model, ours, sources, textbook

from aiayn.config import DecodeConfig
from aiayn.decoding import beam_search, for_inference
from aiayn.runtime import count_cuda_syncs

SHORT, LONG = 20, 40


def decoders(model) -> dict[str, Callable[[torch.Tensor, int], object]]:
    """name -> fn(src, n) that decodes exactly n tokens with `model` (a `Transformer`)."""
    fast = for_inference(model)
    return {"ours greedy": lambda src, n: ours(fast, src, 1, out_len=n),
            "ours beam4": lambda src, n: ours(fast, src, BEAM, out_len=n),
            "textbook beam4": lambda src, n: textbook(model, src, BEAM, out_len=n)}


def kernels(fn: Callable[[], object]) -> tuple[int, float]:
    """(kernels and copies run on the GPU, their GPU milliseconds) of one call."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(gpu), sum(e.time_range.elapsed_us() for e in gpu) / 1e3


def per_step(short: float, long: float) -> float:
    return (long - short) / (LONG - SHORT)


def row(name: str, fn, batch: int, runs: int) -> dict:
    src = sources(batch).cuda()
    fn(src, LONG)  # warm-up: cuBLAS handles, the caching allocator
    waits = {n: count_cuda_syncs(lambda n=n: fn(src, n)) for n in (SHORT, LONG)}
    launched = {n: kernels(lambda n=n: fn(src, n)) for n in (SHORT, LONG)}
    wall = {n: min(time_call(lambda n=n: fn(src, n), "cuda") for _ in range(runs)) * 1e3 for n in (SHORT, LONG)}
    out = {"decoder": name, "batch": batch,
           "waits_per_step": per_step(waits[SHORT], waits[LONG]),
           "kernels_per_step": per_step(launched[SHORT][0], launched[LONG][0]),
           "ms_per_step": per_step(wall[SHORT], wall[LONG]),
           "gpu_ms_per_step": per_step(launched[SHORT][1], launched[LONG][1])}
    out["gpu_busy"] = out["gpu_ms_per_step"] / out["ms_per_step"]
    out["start_waits"] = waits[SHORT] - SHORT * out["waits_per_step"]
    return out


def eos_allowed_waits(model, batch: int) -> int:
    """The waits of ours beam 4 where the untrained model's EOS ends sentences (up to LONG tokens)."""
    src = sources(batch).cuda()
    free = DecodeConfig(max_len_a=0.0, max_len_b=LONG)
    return count_cuda_syncs(lambda: beam_search(for_inference(model), src, free))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--runs", type=int, default=5, help="timed runs per cell; the fastest is reported")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("beam_syncs.py profiles decoding on a CUDA device; none is available")
    model = build_model().cuda()
    rows = [row(name, fn, b, args.runs) for b in args.batch for name, fn in decoders(model).items()]
    print(format_table(rows, [("decoder", "decoder", "s"), ("batch", "batch", "d"),
                              ("waits_per_step", "waits", ".2f"), ("kernels_per_step", "kernels", ".1f"),
                              ("ms_per_step", "ms", ".3f"), ("gpu_ms_per_step", "GPU ms", ".3f"),
                              ("gpu_busy", "GPU busy", ".2f"), ("start_waits", "start waits", ".0f")]))
    eos = {b: eos_allowed_waits(model, b) for b in args.batch}
    print("waits of ours beam4 with EOS allowed (up to 40 tokens): "
          + ", ".join(f"batch {b} {n}" for b, n in eos.items()))
    print("(per step; waits: the host waits for the GPU; ms: wall; GPU ms: kernels and copies on the GPU)\n")
    if args.json:
        emit_json({"device": torch.cuda.get_device_name(), "rows": rows, "eos_allowed_waits": eos})


if __name__ == "__main__":
    main()
