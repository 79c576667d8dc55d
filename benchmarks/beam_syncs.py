"""How often beam search makes the host wait for the GPU (CUDA only): each wait drains the queue of
kernels, so the GPU idles while Python works out the next step. Counted with torch's sync debug
mode (`aiayn.runtime.count_cuda_syncs`) on decode_speed.py's model and sources, beam 4, exactly N
tokens forced (EOS banned before N): the waits of a search of 40 steps minus those of 20 steps,
over the 20 steps between, give the waits per step; the start (encoder, cache) is the rest.
A last column lets EOS end sentences where the untrained model puts it (up to 40 tokens).

    python benchmarks/beam_syncs.py [--batch 1 32] [--json]
"""

from __future__ import annotations

import argparse

import torch
from _common import emit_json, format_table
from decode_speed import build_model, sources

from aiayn.config import DecodeConfig
from aiayn.decoding import beam_search, for_inference
from aiayn.runtime import count_cuda_syncs


def row(model, batch: int) -> dict:
    src = sources(batch).cuda()
    forced = {n: count_cuda_syncs(lambda n=n: beam_search(model, src, DecodeConfig(max_len_a=0.0, max_len_b=n,
                                                                                   min_len=n)))
              for n in (20, 40)}
    free = count_cuda_syncs(lambda: beam_search(model, src, DecodeConfig(max_len_a=0.0, max_len_b=40)))
    per_step = (forced[40] - forced[20]) / 20
    return {"batch": batch, "syncs_20_steps": forced[20], "syncs_40_steps": forced[40], "per_step": per_step,
            "start": forced[20] - 20 * per_step, "eos_allowed": free}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("beam_syncs.py counts waits for a CUDA device; none is available")
    model = for_inference(build_model().cuda())
    rows = [row(model, b) for b in args.batch]
    print(format_table(rows, [("batch", "batch", "d"), ("syncs_20_steps", "20 steps", ",d"),
                              ("syncs_40_steps", "40 steps", ",d"), ("per_step", "per step", ".2f"),
                              ("start", "start", ".0f"), ("eos_allowed", "EOS allowed", ",d")]))
    if args.json:
        emit_json({"device": torch.cuda.get_device_name(), "rows": rows})


if __name__ == "__main__":
    main()
