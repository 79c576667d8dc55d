"""Training throughput: `aiayn.models.transformer.Transformer` against `torch.nn.Transformer`.

Both models train on the SAME token-bucketed batches in the same process, one step each
in turn, the order rotated from batch to batch, so a noisy neighbour slows both alike. A step is the full training step: forward, label-smoothed cross-entropy
(`F.cross_entropy(label_smoothing=ε, ignore_index=pad)`, ε from `OptimConfig`), backward,
Adam step. Throughput is real (non-pad) target tokens per second, the median over the
measured steps. Each row compares the two models in one precision: nn.Transformer runs under
the same autocast as ours, and computes the same function (`match_ours`).

Batches: sentence lengths are the whitespace-token lengths of Multi30k train (de -> en,
+1 for EOS), or synthetic lengths drawn like them when the data is absent; token ids are
random in a vocabulary of 8000. Sentences are sorted by length and packed so that each
batch holds at most `--max-tokens` padded target tokens.

MFU = model FLOPs per second / the fp32 matmul peak this script measures (best of a few
2048³ matmuls on all threads). Model FLOPs are counted exactly on the padded batch
shapes, not as 6·N·tokens: 3 × forward (backward = 2 × forward) where the forward counts
2 FLOPs per multiply-add of every matmul: the Q/K/V/O and FFN projections, the
cross-attention K/V of the memory, QKᵀ and AV (full T×T, no causal discount, as in
PaLM's MFU), and the tied output projection. Embedding look-ups, norms, softmax and the
optimiser are not counted.

bf16 rows use `torch.autocast(device, dtype=torch.bfloat16)`. On a CPU they run by default
only when it multiplies bf16 matrices natively (avx512_bf16 / AMX), judged by timing a
bf16 matmul against an fp32 one; `--precisions fp32,bf16` forces them.

`--device cuda` runs both models on the GPU (timings wait for the queued kernels). There
each row's MFU is against the measured matmul peak of its own precision: fp32 rows against
the fp32 peak (TF32 off, torch's default), bf16 rows against the bf16 peak.

    .venv/bin/python benchmarks/train_throughput.py                 # small + base
    .venv/bin/python benchmarks/train_throughput.py --configs small --steps 10 --json
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 .venv/bin/python benchmarks/train_throughput.py
    MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=268435456 \\
        .venv/bin/python benchmarks/train_throughput.py   # glibc kept from returning memory to the OS

The allocator matters here: with glibc's defaults every large activation is a fresh mmap,
so first-touch page faults show up as slow fill_/copy_/mul. The JSON says which allocator ran.
"""

from __future__ import annotations

import argparse
import gzip
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    SHARED_DATA, add_common_arguments, allocator_name, emit_json, format_table, matmul_peak_gflops,
    median, set_threads, time_call,
)

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ConfigError, OptimConfig, TransformerConfig  # noqa: E402
from aiayn.models.transformer import Transformer  # noqa: E402
from aiayn.runtime import no_cudnn_attention  # noqa: E402
from aiayn.training.config import load_config  # noqa: E402

VOCAB = 8000
FIRST_ID = 4  # ids 0..3 are pad, bos, eos, unk
MAX_LEN = 100  # longer sentences are dropped, as a training data filter would


# -- batches ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Batch:
    src: Tensor  # (B, S) ids + EOS, right-padded with PAD_ID
    tgt_in: Tensor  # (B, T) BOS + ids
    tgt_out: Tensor  # (B, T) ids + EOS
    n_tokens: int  # real target tokens (non-pad in tgt_out)


def sentence_lengths(seed: int) -> list[tuple[int, int]]:
    """(source, target) lengths incl. EOS: Multi30k train de -> en, else synthetic ones like it."""
    de, en = SHARED_DATA / "multi30k" / "train.de.gz", SHARED_DATA / "multi30k" / "train.en.gz"
    if de.is_file() and en.is_file():
        with gzip.open(de, "rt", encoding="utf-8") as fs, gzip.open(en, "rt", encoding="utf-8") as ft:
            pairs = [(len(s.split()) + 1, len(t.split()) + 1) for s, t in zip(fs, ft)]
        return [(s, t) for s, t in pairs if 1 < s <= MAX_LEN and 1 < t <= MAX_LEN]
    rng = random.Random(seed)  # Multi30k: about 12 words per sentence, sd about 4
    pairs = []
    for _ in range(29000):
        t = max(2, min(MAX_LEN, round(rng.gauss(13, 4))))
        pairs.append((max(2, min(MAX_LEN, round(t * rng.uniform(0.8, 1.2)))), t))
    return pairs


def bucket(pairs: list[tuple[int, int]], max_tokens: int) -> list[list[tuple[int, int]]]:
    """Sort by length and pack greedily: rows × longest target <= max_tokens per batch."""
    batches, current, longest = [], [], 0
    for pair in sorted(pairs, key=lambda p: (p[1], p[0])):
        if current and (len(current) + 1) * max(longest, pair[1]) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(pair)
        longest = max(longest, pair[1])
    return batches + ([current] if current else [])


def make_batch(lengths: list[tuple[int, int]], gen: torch.Generator) -> Batch:
    """Random ids of the given lengths (EOS included), right-padded."""
    B, S, T = len(lengths), max(s for s, _ in lengths), max(t for _, t in lengths)
    src = torch.full((B, S), PAD_ID, dtype=torch.long)
    tgt = torch.full((B, T + 1), PAD_ID, dtype=torch.long)  # BOS y EOS
    for i, (s, t) in enumerate(lengths):
        src[i, : s - 1] = torch.randint(FIRST_ID, VOCAB, (s - 1,), generator=gen)
        src[i, s - 1] = EOS_ID
        tgt[i, 0] = BOS_ID
        tgt[i, 1:t] = torch.randint(FIRST_ID, VOCAB, (t - 1,), generator=gen)
        tgt[i, t] = EOS_ID
    tgt_in, tgt_out = tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()  # (B, T) each
    tgt_in[tgt_in == EOS_ID] = PAD_ID  # the EOS position is never an input
    return Batch(src, tgt_in, tgt_out, int((tgt_out != PAD_ID).sum()))


def to_device(b: Batch, device: str) -> Batch:
    return Batch(b.src.to(device), b.tgt_in.to(device), b.tgt_out.to(device), b.n_tokens)


def make_batches(n: int, max_tokens: int, seed: int) -> list[Batch]:
    """`n` batches drawn at random from the length buckets (fixed by `seed`)."""
    buckets = bucket(sentence_lengths(seed), max_tokens)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    return [make_batch(rng.choice(buckets), gen) for _ in range(n)]


# -- the reference model --------------------------------------------------------------------

def _sinusoids(length: int, d_model: int) -> Tensor:
    """§3.5, written out independently of aiayn.modules.embeddings. -> (length, D)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]  # (T, 1)
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    table = torch.zeros(length, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
    return table


class TorchReference(nn.Module):
    """nn.Transformer with shared scaled embeddings, sinusoids and a tied output projection,
    computing the function ours computes: dropout on embeddings and sub-layer outputs only.

    nn.Transformer's one dropout also falls on attention weights (which keeps torch's CPU
    attention off its fused kernels) and inside the FFN, and it always adds a final LayerNorm
    to both stacks; ours does those only when asked (`attention_dropout`, `activation_dropout`,
    pre-norm), so they are switched off here to match. The decoder gets the causal mask only:
    padded target positions are never attended by real ones.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        D, self.pad_id = cfg.d_model, PAD_ID
        self.embed = nn.Embedding(cfg.src_vocab_size, D, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=D**-0.5)
        self.scale = math.sqrt(D)
        self.register_buffer("pe", _sinusoids(MAX_LEN + 2, D), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(
            D, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff, cfg.dropout,
            layer_norm_eps=cfg.layer_norm_eps, batch_first=True, norm_first=cfg.norm_first,
        )
        match_ours(self.transformer, cfg)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """(B, S), (B, T) -> logits (B, T, V)."""
        S, T = src.shape[1], tgt.shape[1]
        src_pad = src == self.pad_id  # (B, S), True = padding (nn.Transformer's polarity)
        x = self.dropout(self.embed(src) * self.scale + self.pe[:S])
        y = self.dropout(self.embed(tgt) * self.scale + self.pe[:T])
        causal = nn.Transformer.generate_square_subsequent_mask(T)  # (T, T) float, -inf above
        h = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=src_pad,
                             memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return F.linear(h, self.embed.weight)


def match_ours(transformer: nn.Transformer, cfg: TransformerConfig) -> None:
    """Give nn.Transformer our dropouts (attention weights and the FFN inside at the config's
    `attention_dropout` / `activation_dropout`, 0 by default) and our final norms (pre-norm only)."""
    for layer in [*transformer.encoder.layers, *transformer.decoder.layers]:
        for attention in (getattr(layer, "self_attn", None), getattr(layer, "multihead_attn", None)):
            if attention is not None:
                attention.dropout = cfg.attention_dropout
        layer.dropout = nn.Dropout(cfg.activation_dropout) if cfg.activation_dropout else nn.Identity()
    if not cfg.norm_first:
        transformer.encoder.norm, transformer.decoder.norm = nn.Identity(), nn.Identity()


# -- FLOPs ----------------------------------------------------------------------------------

def train_flops(cfg: TransformerConfig, B: int, S: int, T: int) -> float:
    """3 × the forward matmul FLOPs of one padded batch (see the module docstring)."""
    D, Fd, V = cfg.d_model, cfg.d_ff, cfg.tgt_vocab_size
    ns, nt = B * S, B * T
    enc = 2 * ns * (4 * D * D + 2 * D * Fd) + 4 * B * S * S * D
    dec = 2 * nt * (6 * D * D + 2 * D * Fd) + 2 * ns * 2 * D * D + 4 * B * T * T * D + 4 * B * T * S * D
    out = 2 * nt * D * V
    return 3.0 * (cfg.n_encoder_layers * enc + cfg.n_decoder_layers * dec + out)


# -- the timed step -------------------------------------------------------------------------

@dataclass
class Runner:
    """One model + optimiser + precision, and the per-step measurements."""

    name: str
    model: nn.Module
    bf16: bool
    optimizer: torch.optim.Optimizer = field(init=False)
    tok_s: list[float] = field(default_factory=list)
    flop_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        optim = OptimConfig()
        self.model.train()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=optim.betas, eps=optim.eps)

    def step(self, batch: Batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(batch.src.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch.tgt_out.flatten(),
                               label_smoothing=OptimConfig().label_smoothing, ignore_index=PAD_ID)
        loss.backward()
        self.optimizer.step()
        self.losses.append(loss.item())

    def timed_step(self, batch: Batch, flops: float, record: bool) -> None:
        seconds = time_call(lambda: self.step(batch), batch.src.device)
        if not math.isfinite(self.losses[-1]):
            raise RuntimeError(f"{self.name}: non-finite loss {self.losses[-1]}")
        if record:
            self.tok_s.append(batch.n_tokens / seconds)
            self.flop_s.append(flops / seconds)


def model_config(name: str) -> TransformerConfig:
    """A preset with "+key=value" overrides, each read as `--set model.key=value`: "small+d_model=128+dropout=0.2"."""
    preset, *overrides = name.split("+")
    sets = ["train.max_updates=1", f'model.preset="{preset}"', *(f"model.{item}" for item in overrides)]
    try:
        return load_config(None, sets).model.build(VOCAB, VOCAB)
    except ConfigError as e:
        raise SystemExit(f"--configs {name!r}: {e}") from None


def run_config(name: str, precisions: list[str], batches: list[Batch], warmup: int,
               peaks: dict[str, float]) -> list[dict]:
    """Ours and nn.Transformer in each precision, one step each on every batch, the order rotated
    from batch to batch (none always runs after the same one). `peaks`: GFLOP/s per precision
    ("fp32", "bf16"), the MFU denominators."""
    cfg = model_config(name)
    device = batches[0].src.device
    torch.manual_seed(0)
    pairs = [(Runner(f"ours-{p}", Transformer(cfg).to(device), bf16=(p == "bf16")),
              Runner(f"torch-{p}", TorchReference(cfg).to(device), bf16=(p == "bf16"))) for p in precisions]
    order = [runner for pair in pairs for runner in pair]
    for i, batch in enumerate(batches):
        flops = train_flops(cfg, batch.src.shape[0], batch.src.shape[1], batch.tgt_in.shape[1])
        for runner in order[i % len(order):] + order[:i % len(order)]:
            runner.timed_step(batch, flops, record=i >= warmup)
    return [{
        "config": name, "precision": p, "ours_tok_s": median(ours.tok_s), "torch_tok_s": median(ref.tok_s),
        "ratio": median(ours.tok_s) / median(ref.tok_s), "mfu": median(ours.flop_s) / (peaks[p] * 1e9),
        "torch_mfu": median(ref.flop_s) / (peaks[p] * 1e9),
    } for p, (ours, ref) in zip(precisions, pairs)]


# -- command line ---------------------------------------------------------------------------

def native_bf16(fp32_gflops_512: float) -> tuple[bool, float]:
    """Whether bf16 matmuls run at least half as fast as fp32 here, and the bf16 GFLOP/s."""
    bf16 = matmul_peak_gflops(512, repeats=2, dtype=torch.bfloat16)
    return bf16 >= 0.5 * fp32_gflops_512, bf16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="small,base", help="comma-separated presets, each with optional +key=value overrides "
                                                           "(as --set model.key=value), e.g. small+d_model=128 (default: small,base)")
    p.add_argument("--precisions", default="auto",
                   help="fp32,bf16 or auto (default: bf16 only where this CPU has native bf16 matmuls)")
    p.add_argument("--steps", type=int, default=3, help="measured steps per model and config (default: 3)")
    p.add_argument("--warmup-steps", type=int, default=1, help="untimed steps first (default: 1)")
    p.add_argument("--max-tokens", type=int, default=4000, help="padded target tokens per batch (default: 4000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-size", type=int, default=2048, help="n of the n³ fp32 matmul timed for the peak")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    add_common_arguments(p)
    return p.parse_args(argv)


def choose_precisions(arg: str, device: str = "cpu") -> tuple[list[str], str | None]:
    """The precisions to run, and a note when bf16 was left out."""
    if arg != "auto":
        precisions = [p.strip() for p in arg.split(",") if p.strip()]
        bad = sorted(set(precisions) - {"fp32", "bf16"})
        if bad or not precisions:
            raise SystemExit(f"--precisions: expected fp32 and/or bf16, got {arg!r}")
        return sorted(precisions, key=["fp32", "bf16"].index), None
    if device != "cpu":
        return ["fp32", "bf16"], None
    native, bf16 = native_bf16(matmul_peak_gflops(512, repeats=2))
    if native:
        return ["fp32", "bf16"], None
    return ["fp32"], (f"bf16 skipped: no native bf16 matmul on this CPU ({bf16:.1f} GFLOP/s at 512³); "
                      "force with --precisions fp32,bf16")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = set_threads(args.threads)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for name in configs:
        model_config(name)  # unknown presets fail before any timing
    precisions, note = choose_precisions(args.precisions, args.device)
    peaks = {p: matmul_peak_gflops(args.peak_size, dtype=torch.bfloat16 if p == "bf16" else torch.float32,
                                   device=args.device) for p in ["fp32", *precisions]}
    peak = peaks["fp32"]
    print(f"device {args.device}, threads {threads}, allocator {allocator_name()}, matmul peak "
          + ", ".join(f"{p} {g:,.1f} GFLOP/s" for p, g in peaks.items()) + f" ({args.peak_size}³), "
          f"{args.steps} steps after {args.warmup_steps} warm-up, ≤{args.max_tokens} target tokens per batch")
    if note:
        print(note)
    batches = [to_device(b, args.device) for b in make_batches(args.warmup_steps + args.steps, args.max_tokens, args.seed)]
    rows = []
    with no_cudnn_attention(args.device):  # as `aiayn train` does: cuDNN's kernel plans every new shape
        for name in configs:
            rows += run_config(name, precisions, batches, args.warmup_steps, peaks)
    print(format_table(rows, [
        ("config", "config", ""), ("precision", "precision", ""), ("ours_tok_s", "ours tok/s", ",.0f"),
        ("torch_tok_s", "torch tok/s", ",.0f"), ("ratio", "ratio", ".2f"),
        ("mfu", "ours MFU", ".2f"), ("torch_mfu", "torch MFU", ".2f"),
    ]))
    print("tok/s: real target tokens per second, median over steps; MFU: exact matmul FLOPs "
          "(3 x forward, attention included) / the matmul peak of the row's precision")
    if args.json:
        emit_json({"device": args.device, "peak_gflops": peak, "peaks_gflops": peaks, "threads": threads, "allocator": allocator_name(),
                   "steps": args.steps, "max_tokens": args.max_tokens, "skipped": note, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
