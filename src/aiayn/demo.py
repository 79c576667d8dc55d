"""The offline demo: learn a synthetic task (copy, reverse or sort) and decode held-out examples."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, OptimConfig, TransformerConfig
from aiayn.data.synthetic import symbols, synthetic_pairs
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.decoding.greedy import greedy_search
from aiayn.model import Transformer
from aiayn.training.schedule import noam_lr

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    task: str = "reverse"
    n_symbols: int = 10
    min_len: int = 3
    max_len: int = 12
    n_train: int = 20000
    n_test: int = 500
    updates: int = 1200
    batch_size: int = 64
    preset: str = "tiny"
    d_model: int = 64
    d_ff: int = 256
    n_heads: int = 4
    warmup_steps: int = 200
    lr_factor: float = 2.0
    seed: int = 1


@dataclass
class DemoResult:
    accuracy: float  # exact match, greedy
    seconds: float
    model_dir: Path
    examples: list[tuple[str, str, str]]  # (source, reference, hypothesis)


def _tensorize(ids: list[list[int]], bos: bool = False, eos: bool = False) -> torch.Tensor:
    rows = [torch.tensor(([BOS_ID] if bos else []) + r + ([EOS_ID] if eos else [])) for r in ids]
    return pad_sequence(rows, batch_first=True, padding_value=PAD_ID)


def run_demo(out_dir: str | Path, cfg: DemoConfig = DemoConfig(), progress: bool = True) -> DemoResult:
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    tok = SymbolTokenizer(symbols(cfg.n_symbols))
    lens = dict(n_symbols=cfg.n_symbols, min_len=cfg.min_len, max_len=cfg.max_len)
    train = synthetic_pairs(cfg.task, cfg.n_train, seed=cfg.seed, **lens)
    test = synthetic_pairs(cfg.task, cfg.n_test, seed=cfg.seed + 1, **lens)
    model_cfg = TransformerConfig.preset(cfg.preset, src_vocab_size=tok.vocab_size, d_model=cfg.d_model,
                                         d_ff=cfg.d_ff, n_heads=cfg.n_heads)
    model = Transformer(model_cfg)
    _train(model, [(tok.encode(s), tok.encode(t)) for s, t in train], cfg, progress)
    model.eval()
    model_dir = model.save_pretrained(Path(out_dir) / "model")
    save_tokenizers(TokenizerPair.shared(tok), model_dir)
    hyps = [tok.decode(h) for h in greedy_search(model, _tensorize([tok.encode(s) for s, _ in test], eos=True))]
    accuracy = sum(h == t for h, (_, t) in zip(hyps, test)) / len(test)
    examples = [(s, t, h) for (s, t), h in zip(test, hyps)]
    return DemoResult(accuracy, time.perf_counter() - start, model_dir, examples)


def _train(model: Transformer, data: list[tuple[list[int], list[int]]], cfg: DemoConfig, progress: bool) -> None:
    optim = OptimConfig(warmup_steps=cfg.warmup_steps, lr_factor=cfg.lr_factor)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=optim.betas, eps=optim.eps, fused=True)
    rng = random.Random(cfg.seed)
    model.train()
    bar = tqdm(range(1, cfg.updates + 1), desc="demo", disable=not progress, unit="update")
    for step in bar:
        batch = rng.sample(data, cfg.batch_size)
        src = _tensorize([s for s, _ in batch], eos=True)
        tgt_in, tgt_out = _tensorize([t for _, t in batch], bos=True), _tensorize([t for _, t in batch], eos=True)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID,
                               label_smoothing=optim.label_smoothing)
        for group in opt.param_groups:
            group["lr"] = noam_lr(step, model.config.d_model, optim.warmup_steps, optim.lr_factor)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
