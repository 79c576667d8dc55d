"""Decoding speed in target tokens/s: aiayn (fp32, bf16, int8) vs a textbook decoder, Hugging Face and CTranslate2.

All decoders run the same model, of one of four sizes (`--size`), with untrained, seeded weights:

    small  the `small` preset (d_model 256, 4 heads, 3+3 layers, d_ff 1024), an 8,000-id joint vocabulary
    opus   a random Marian of opus-mt's shape (d_model 512, 8 heads, 6+6 layers, d_ff 2048, swish,
           58,101 ids) saved by `transformers` and imported with `aiayn import hf` (tests/interop/hf_checkpoints)
    base   the paper's base preset (512, 8 heads, 6+6, 2048) with a 37,000-id shared vocabulary (§5.1)
    big    the paper's big preset (1024, 16 heads, 6+6, 4096), the same vocabulary

The model is saved once as an aiayn model directory, and every peer loads it in a process of its own,
timed (`load s`), with the resident memory the process gained loading it (`load MB`) and at its peak
over the whole run (`peak MB`, VmHWM minus the RSS before loading). Hugging Face gets a
`MarianMTModel` with our weights copied in (same architecture: post-norm, scaled tied embeddings,
ReLU FFN, sinusoidal positions; presets only), CTranslate2 a model converted from ours with its spec
API (`aiayn.export.ctranslate2`, fp32 and int8; converted before the peers start). Greedy outputs
are compared as a check of the conversions. Sources are 30 tokens (29 random + EOS); every decoder
is forced to produce exactly `out_len` target tokens (40 at `small`, 32 above: EOS forbidden before,
at most that many), so tokens/s = batch · out_len / seconds, the whole translation (encoder included) timed.

"ours_bf16" and "ours_int8" are aiayn's fast decoder in bf16 (only where the CPU multiplies bf16
natively: avx512_bf16 or AMX; elsewhere the row says so and is skipped) and with int8 weights and
dynamically quantized activations (`aiayn.modules.quantized`). A second table prints the ratios.

"textbook" re-runs the full decoder over the prefix at every step (no key/value cache),
as the Annotated Transformer's greedy_decode does, with a plain beam search on top.

Timings are the median of --runs runs after one warm-up, with torch.set_num_threads(2)
and CTranslate2 intra_threads 2 (--threads). Each peer runs in a process of its own (`Peers`:
in one process, CTranslate2's OpenMP runtime slowed aiayn's batch-1 decoding by a third), one
at a time, and their runs are interleaved, so load changes on a shared machine hit all alike;
absolute numbers are still noisy there.

    .venv/bin/python benchmarks/decode_speed.py [--size small|opus|base|big] [--json] [--runs 3] [--batch 1 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from _common import emit_json

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, DecodeConfig, TransformerConfig
from aiayn.decoding import beam_search, for_inference, greedy_search
from aiayn.models import load_model
from aiayn.models.transformer import Transformer
from aiayn.runtime import flush_denormals, native_bf16

ROOT = Path(__file__).resolve().parents[1]
VOCAB, SRC_LEN, OUT_LEN, BEAM = 8000, 30, 40, 4
STRATEGIES = {"greedy": 1, "beam4": BEAM}
PEERS = ["ours", "ours_bf16", "ours_int8", "textbook", "hf", "ct2_fp32", "ct2_int8"]
RATIOS = [("ours", "ct2_fp32"), ("ours_int8", "ct2_int8"), ("ours_bf16", "ours"), ("ours_int8", "ours"),
          ("ours", "hf"), ("ours", "textbook")]  # (numerator, denominator) columns of the ratio table


@dataclass(frozen=True)
class Size:
    """A model size of the table: a preset (or an imported Marian: `marian`), its vocabulary, the forced output length."""
    preset: str
    vocab: int
    out_len: int
    marian: bool = False
    skip: tuple[str, ...] = ()  # peers left out unless asked for (too slow, or the wrong architecture)


SIZES = {
    "small": Size("small", VOCAB, OUT_LEN),
    "opus": Size("base", 58101, 32, marian=True, skip=("textbook", "hf")),  # opus-mt-de-en's shape, swish FFN
    "base": Size("base", 37000, 32, skip=("textbook", "hf")),
    "big": Size("big", 37000, 32, skip=("textbook", "hf")),
}


def build_model(preset: str = "small", vocab: int = VOCAB, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig.preset(preset, src_vocab_size=vocab)).eval()


def model_dir(size: Size, directory: Path) -> Path:
    """An aiayn model directory of `size` in `directory` (made once; reused when it is there)."""
    out = directory / f"{'marian' if size.marian else size.preset}-{size.vocab}"
    if (out / "model.safetensors").is_file():
        return out
    if size.marian:  # saved by transformers, imported as a user would (`aiayn import hf`)
        sys.path[:0] = [str(ROOT / "tests" / "interop"), str(ROOT / "tests")]  # the interop tests' builders
        import hf_checkpoints

        from aiayn.interop import import_hf

        hf = hf_checkpoints.marian(directory / "marian-hf", d_model=512, layers=6, heads=8, d_ff=2048,
                                   vocab_size=size.vocab, init_std=0.02)
        return import_hf(hf, out)
    build_model(size.preset, size.vocab).save_pretrained(out)
    return out


def sources(batch: int, vocab: int = VOCAB, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, SRC_LEN), generator=g)
    src[:, -1] = 2  # EOS
    return src


# -- ours ---------------------------------------------------------------------------------
def ours(model, src, beam: int, out_len: int = OUT_LEN) -> list[list[int]]:
    """Exactly `out_len` tokens per sentence: greedy for beam 1, else beam search."""
    if beam == 1:
        return greedy_search(model, src, 0.0, out_len, min_len=out_len)
    cfg = DecodeConfig(beam_size=beam, max_len_a=0.0, max_len_b=out_len, min_len=out_len)
    return [h[0].tokens for h in beam_search(model, src, cfg)]


# -- textbook: recompute the whole prefix at every step -------------------------------------
@torch.inference_mode()
def textbook(model, src, beam: int, out_len: int = OUT_LEN) -> list[list[int]]:
    enc = model.encode(src)
    B = src.shape[0]
    dev = src.device
    rows = torch.arange(B, device=dev).repeat_interleave(beam)  # (B·K,)
    enc.memory, enc.src_mask = enc.memory[rows], enc.src_mask[rows]
    prefix = torch.full((B * beam, 1), BOS_ID, device=dev)  # (B·K, 1 + t)
    scores = torch.full((B, beam), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    for _ in range(out_len):
        cache = model.init_cache(enc, capacity=prefix.shape[1])  # nothing reused between steps
        logits = model.decode(prefix, cache).logits[:, -1].float()  # (B·K, V)
        logits[:, [PAD_ID, BOS_ID, EOS_ID]] = float("-inf")
        logp = logits.log_softmax(-1).view(B, beam, -1)
        cand = scores[:, :, None] + logp  # (B, K, V)
        scores, flat = cand.view(B, -1).topk(beam, dim=1)  # (B, K)
        origin = (torch.arange(B, device=dev)[:, None] * beam + flat // logp.shape[-1]).view(-1)
        prefix = torch.cat([prefix[origin], (flat % logp.shape[-1]).view(-1, 1)], dim=1)
    return prefix.view(B, beam, -1)[:, 0, 1:].tolist()


# -- Hugging Face Marian with our weights -------------------------------------------------------
def marian_from_ours(model: Transformer):
    from transformers import MarianConfig, MarianMTModel

    c = model.config
    hf_cfg = MarianConfig(
        vocab_size=c.src_vocab_size, decoder_vocab_size=c.tgt_vocab_size, d_model=c.d_model,
        encoder_layers=c.n_encoder_layers, decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads, decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function="relu",
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=512,
        scale_embedding=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID, forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    hf = MarianMTModel(hf_cfg).eval()
    with torch.no_grad():
        hf.model.shared.weight.copy_(model.encoder.embed.weight)
        table = model.encoder.positions(512)  # (512, D), our interleaved sinusoids
        for stack, ours_stack in ((hf.model.encoder, model.encoder), (hf.model.decoder, model.decoder)):
            stack.embed_tokens.weight.copy_(model.encoder.embed.weight)
            stack.embed_positions.weight.copy_(table)
            for theirs, mine in zip(stack.layers, ours_stack.layers):
                _copy_layer(theirs, mine)
        hf.final_logits_bias.zero_()
        hf.lm_head.weight.copy_(model.decoder.embed.weight)
    return hf


def _copy_attention(theirs, mine) -> None:
    for proj, w, b in zip((theirs.q_proj, theirs.k_proj, theirs.v_proj),
                          mine.in_proj.weight.chunk(3), mine.in_proj.bias.chunk(3)):
        proj.weight.copy_(w)
        proj.bias.copy_(b)
    theirs.out_proj.load_state_dict(mine.out_proj.state_dict())


def _copy_layer(theirs, mine) -> None:
    _copy_attention(theirs.self_attn, mine.self_attn)
    theirs.self_attn_layer_norm.load_state_dict(mine.sa_conn.norm.state_dict())
    if hasattr(theirs, "encoder_attn"):
        _copy_attention(theirs.encoder_attn, mine.cross_attn)
        theirs.encoder_attn_layer_norm.load_state_dict(mine.ca_conn.norm.state_dict())
    theirs.fc1.load_state_dict(mine.ff.linear1.state_dict())
    theirs.fc2.load_state_dict(mine.ff.linear2.state_dict())
    theirs.final_layer_norm.load_state_dict(mine.ff_conn.norm.state_dict())


def hf_generate(hf, src, beam: int, out_len: int = OUT_LEN) -> list[list[int]]:
    with torch.inference_mode():
        out = hf.generate(input_ids=src, attention_mask=src != 0, num_beams=beam, do_sample=False,
                          max_new_tokens=out_len, min_new_tokens=out_len, early_stopping=False,
                          length_penalty=0.0 if beam > 1 else 1.0, suppress_tokens=[0, 1])  # PAD, BOS: as ours
    return [row[1:] for row in out.tolist()]  # drop the decoder start token


# -- CTranslate2, converted from our weights with the spec API (aiayn.export.ctranslate2) ---------
def ct2_convert(model: Transformer, out_dir: Path, quantization: str | None) -> Path:
    """Write a CTranslate2 model of `model` with placeholder pieces t4, t5, ... for the ids."""
    from aiayn.export.ctranslate2 import convert_transformer

    c = model.config
    vocab = [_piece(i) for i in range(c.src_vocab_size)]
    return convert_transformer(model, out_dir, quantization, vocab, vocab[: c.tgt_vocab_size])


def ct2_translate(translator, src, beam: int, out_len: int = OUT_LEN) -> list[list[int]]:
    tokens = [[_piece(i) for i in row[:-1]] for row in src.tolist()]  # the model adds EOS itself
    results = translator.translate_batch(tokens, beam_size=beam, max_decoding_length=out_len,
                                         min_decoding_length=out_len, length_penalty=0.0,
                                         suppress_sequences=[["<blank>"], ["<s>"]],  # PAD, BOS: as ours
                                         max_batch_size=0, return_scores=False)
    return [[_id(p) for p in r.hypotheses[0]] for r in results]


def _piece(i: int) -> str:
    return {0: "<blank>", 1: "<s>", 2: "</s>", 3: "<unk>"}.get(i, f"t{i}")


def _id(piece: str) -> int:
    return {"<blank>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}.get(piece) or int(piece[1:])


# -- one process per peer, timed in turn ---------------------------------------------------------
def make_peer(name: str, model_path: Path, options: dict):
    """The decode function (src, beam) -> 1-best token lists of peer `name`, loaded from the aiayn model
    directory `model_path` (CTranslate2: from its conversion beside it, `convert_peers`); ValueError says
    why it cannot run here."""
    device, out_len = options["device"], options["out_len"]
    if name.startswith("ct2_"):
        if device != "cpu":
            raise ValueError("run on the CPU only here")
        import ctranslate2

        path = ct2_path(model_path, name)
        if not path.is_dir():
            raise ValueError("not converted (ctranslate2 is not installed)")
        tr = ctranslate2.Translator(str(path), device="cpu", compute_type="float32" if name == "ct2_fp32" else "int8",
                                    intra_threads=options["threads"], inter_threads=1)
        return lambda src, beam: ct2_translate(tr, src, beam, out_len)
    model = load_model(model_path, device)
    if name == "ours":
        decoder = model if options["module_step"] else for_inference(model)  # built once, as a Translator does
        return lambda src, beam: ours(decoder, src, beam, out_len)
    if name == "textbook":
        return lambda src, beam: textbook(model, src, beam, out_len)
    if name in ("ours_bf16", "ours_int8"):
        precision = name.split("_")[1]
        if precision == "bf16" and not native_bf16(device):
            raise ValueError(f"skipped: this {device} has no native bf16 matmuls (avx512_bf16 or AMX)")
        if precision == "int8" and device != "cpu":
            raise ValueError("int8 decoding runs on the CPU")
        low = for_inference(model, precision)
        return lambda src, beam: ours(low, src, beam, out_len)
    hf = marian_from_ours(model).to(device)
    return lambda src, beam: hf_generate(hf, src, beam, out_len)


def ct2_path(model_path: Path, name: str) -> Path:
    return model_path.parent / f"{model_path.name}-{name}"


def convert_peers(model_path: Path, names: Sequence[str]) -> None:
    """CTranslate2's models of `model_path` (fp32, int8), converted once before any peer starts."""
    wanted = [n for n in names if n.startswith("ct2_") and not ct2_path(model_path, n).is_dir()]
    if not wanted or importlib.util.find_spec("ctranslate2") is None:
        return
    model = load_model(model_path)
    for name in wanted:
        ct2_convert(model, ct2_path(model_path, name), None if name == "ct2_fp32" else "int8")


def memory_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (the peak) of this process, in MB."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    return kb / 1024


def _serve_peer(conn, name: str, model_path: Path, options: dict) -> None:
    """A peer's process: load the model and the peer (timed, with the resident memory it took), then
    time one decode per request (beam, batch) -> (seconds, 1-best tokens, peak MB gained), until None."""
    torch.set_num_threads(options["threads"])
    flush_denormals()  # as aiayn's commands do, before torch's first parallel op
    before = memory_mb("VmRSS")
    start = time.perf_counter()
    try:
        fn = make_peer(name, model_path, options)
    except Exception as e:  # not installed, an API change, or not on this machine: n/a
        conn.send(f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e))
        return
    conn.send((time.perf_counter() - start, memory_mb("VmRSS") - before))
    while (request := conn.recv()) is not None:
        beam, batch = request
        src = sources(batch, options["vocab"]).to(options["device"])
        _sync(options["device"])
        t0 = time.perf_counter()
        out = fn(src, beam)
        _sync(options["device"])
        conn.send((time.perf_counter() - t0, out, memory_mb("VmHWM") - before))


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


class Peers:
    """One process per peer, so that no peer's thread pools or allocator state slow another (in one
    process, CTranslate2's own OpenMP runtime beside torch's slowed aiayn's batch-1 decoding by a
    third for as long as the process lived). Only one peer runs at a time."""

    def __init__(self, names: Sequence[str], model_path: Path, options: dict):
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs, self.loads, self.peaks = {}, [], {}, {}
        for name in names:  # loaded one at a time, so that each load is timed on a quiet machine
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve_peer, args=(child, name, model_path, options), daemon=True)
            proc.start()
            self.procs.append(proc)
            loaded = parent.recv()
            if isinstance(loaded, str):
                print(f"{name}: n/a ({loaded})", file=sys.stderr)
                continue
            self.conns[name], self.loads[name] = parent, loaded  # (seconds, MB gained)

    def run(self, name: str, beam: int, batch: int) -> tuple[float, list[list[int]]]:
        self.conns[name].send((beam, batch))
        seconds, out, peak = self.conns[name].recv()
        self.peaks[name] = peak
        return seconds, out

    def close(self) -> None:
        for conn in self.conns.values():
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)


def interleaved_tokens_per_second(peers: Peers, beam: int, batch: int, runs: int) -> tuple[dict, dict]:
    """Median tokens/s of each peer. Runs are interleaved so that load changes on a shared machine hit
    every peer alike: the order rotates every round and runs backwards every other one, so no peer
    always follows the same one. Returns (speeds, outputs)."""
    names = list(peers.conns)
    outs = {name: peers.run(name, beam, batch)[1] for name in names}  # warm-up, and the outputs to compare
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(runs):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in (order if r % 2 == 0 else order[::-1]):
            times[name].append(peers.run(name, beam, batch)[0])
    speeds = {name: sum(len(row) for row in outs[name]) / statistics.median(times[name]) for name in names}
    return speeds, outs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.add_argument("--runs", type=int, default=3, help="timed runs per cell; the median is reported")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", default="small", choices=list(SIZES), help="the model's size (default: small)")
    p.add_argument("--preset", help="another model preset at --size small (tiny for a smoke test)")
    p.add_argument("--vocab", type=int, help=f"another joint vocabulary size at --size small (default: {VOCAB})")
    p.add_argument("--cache", type=Path, help="keep the model directories here (made once) instead of a temporary one")
    p.add_argument("--skip", nargs="*", choices=PEERS, help="peers to leave out (default: none at small; "
                   "textbook and hf above)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu); timings wait for CUDA kernels")
    p.add_argument("--module-step", action="store_true",
                   help="ours with the model's own step instead of its FastDecoder (models/fast_decoder.py)")
    args = p.parse_args(argv)
    size = SIZES[args.size]
    if args.preset or args.vocab:
        if args.size != "small":
            p.error("--preset and --vocab change the small size only")
        size = Size(args.preset or size.preset, args.vocab or size.vocab, size.out_len)
    skip = size.skip if args.skip is None else args.skip
    names = [n for n in PEERS if n not in skip and not (args.module_step and n.startswith("ours_"))]
    options = {"threads": args.threads, "vocab": size.vocab, "out_len": size.out_len, "device": args.device,
               "module_step": args.module_step}
    with tempfile.TemporaryDirectory() as tmp:
        path = model_dir(size, args.cache or Path(tmp))
        convert_peers(path, names)
        rows, loads = measure(Peers(names, path, options), args)
    print(f"\n{args.size}: {size.preset} preset{' (an imported Marian)' if size.marian else ''}, {size.vocab:,} ids, "
          f"{size.out_len} target tokens a sentence, {args.threads} threads")
    print_ratios(rows)
    print_memory(loads)
    print("same 1-best tokens as ours: " + "; ".join(
        f"{r['strategy']} b{r['batch']}: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["same_as_ours"].items())
        for r in rows if "same_as_ours" in r))
    if args.json:
        emit_json({"size": args.size, "preset": size.preset, "vocab": size.vocab, "out_len": size.out_len,
                   "rows": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
                   "memory": loads})
    return 0


def measure(peers: Peers, args) -> tuple[list[dict], dict]:
    """The speed rows of every (strategy, batch) cell, and each peer's load time, load MB and peak MB."""
    rows = []
    try:
        print_header()
        for strategy, beam in STRATEGIES.items():
            for batch in args.batch:
                speeds, outs = interleaved_tokens_per_second(peers, beam, batch, args.runs)
                row = {"strategy": strategy, "batch": batch, **{name: speeds.get(name) for name in PEERS}}
                row.update({f"{a}/{b}": (row[a] / row[b] if row[a] and row[b] else None) for a, b in RATIOS})
                if "ours" in outs:  # the 1-best tokens of each peer, against ours
                    row["same_as_ours"] = {k: v == outs["ours"] for k, v in outs.items() if k != "ours"}
                rows.append(row)
                print_row(row)
    finally:
        peers.close()
    loads = {name: {"load_s": round(seconds, 3), "load_mb": round(mb, 1), "peak_mb": round(peers.peaks.get(name, mb), 1)}
             for name, (seconds, mb) in peers.loads.items()}
    return rows, loads


def print_memory(loads: dict) -> None:
    print(f"\n{'peer':<11}{'load s':>8}{'load MB':>9}{'peak MB':>9}   (resident memory gained by the peer's process)")
    for name, m in loads.items():
        print(f"{name:<11}{m['load_s']:>8.2f}{m['load_mb']:>9,.0f}{m['peak_mb']:>9,.0f}")


def print_header() -> None:
    print(f"{'strategy':<9}{'batch':>6}" + "".join(f"{n:>11}" for n in PEERS) + "   (target tokens/s)")


def print_ratios(rows: list[dict]) -> None:
    print(f"\n{'strategy':<9}{'batch':>6}" + "".join(f"{a + '/' + b:>20}" for a, b in RATIOS) + "   (ratios)")
    for row in rows:
        cells = "".join(f"{'n/a':>20}" if row[f'{a}/{b}'] is None else f"{row[f'{a}/{b}']:>20.2f}" for a, b in RATIOS)
        print(f"{row['strategy']:<9}{row['batch']:>6}{cells}")


def print_row(row: dict) -> None:
    cells = "".join(f"{'n/a':>11}" if row[n] is None else f"{row[n]:>11,.0f}" for n in PEERS)
    print(f"{row['strategy']:<9}{row['batch']:>6}{cells}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
