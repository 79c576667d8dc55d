"""The offline demo: learn a synthetic task (copy, reverse or sort) with the full training
pipeline (`aiayn.training`, the config of recipes/demo.toml) and decode held-out examples."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from aiayn.config import OptimConfig
from aiayn.data.synthetic import synthetic_pairs
from aiayn.training.config import CONFIG_NAME, DataConfig, ModelSpec, RunConfig, TrainConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    task: str = DataConfig.task  # the synthetic-task defaults live in DataConfig
    n_symbols: int = DataConfig.n_symbols
    min_len: int = DataConfig.min_len
    max_len: int = DataConfig.max_len
    n_train: int = DataConfig.n_train
    n_test: int = 500
    updates: int = 1500
    batch_size: int = 64  # sentences per batch, approximately (batches are token-bucketed)
    preset: str = "tiny"
    model_overrides: tuple[tuple[str, object], ...] = (("d_model", 64), ("d_ff", 256), ("n_heads", 4))
    warmup_steps: int = 200
    lr_factor: float = 1.0
    cooldown: float = 0.3  # the last 30% of the updates decay the lr linearly to 0
    seed: int = 1


@dataclass
class DemoResult:
    accuracy: float  # exact match, greedy
    seconds: float
    model_dir: Path
    examples: list[tuple[str, str, str]]  # (source, reference, hypothesis)


def train_config(cfg: DemoConfig, out_dir: str | Path, progress: bool = True) -> TrainConfig:
    """The `TrainConfig` of the demo (recipes/demo.toml holds the same for the default DemoConfig)."""
    # token budget per batch: batch_size · (longest source + EOS + BOS + longest target)
    max_tokens = cfg.batch_size * (2 * cfg.max_len + 3)
    return TrainConfig(
        model=ModelSpec(cfg.preset, cfg.model_overrides),
        optim=OptimConfig(warmup_steps=cfg.warmup_steps, lr_factor=cfg.lr_factor),
        data=DataConfig(corpus="synthetic", task=cfg.task, vocab_type="symbols", n_symbols=cfg.n_symbols,
                        min_len=cfg.min_len, max_len=cfg.max_len, n_train=cfg.n_train, n_valid=200,
                        max_tokens=max_tokens, batching="random"),
        train=RunConfig(run_dir=str(out_dir), max_updates=cfg.updates, validate_every=max(cfg.updates // 2, 1),
                        bleu=False, save_every_updates=max(cfg.updates // 2, 1), cooldown=cfg.cooldown,
                        seed=cfg.seed, progress=progress),
    )


def run_demo(out_dir: str | Path, cfg: DemoConfig = DemoConfig(), progress: bool = True) -> DemoResult:
    """Train into `out_dir` (a run directory; the model lands in `out_dir/model`), then
    decode `n_test` held-out examples greedily and score exact match."""
    from aiayn.training.pipeline import train
    from aiayn.translator import Translator

    start = time.perf_counter()
    _clear_previous_run(Path(out_dir))
    train(train_config(cfg, out_dir, progress))
    model_dir = Path(out_dir) / "model"
    test = synthetic_pairs(cfg.task, cfg.n_test, seed=cfg.seed + 1, n_symbols=cfg.n_symbols,
                           min_len=cfg.min_len, max_len=cfg.max_len)
    hyps = Translator.from_pretrained(model_dir).translate([s for s, _ in test], method="greedy")
    accuracy = sum(h == t for h, (_, t) in zip(hyps, test)) / len(test)
    examples = [(s, t, h) for (s, t), h in zip(test, hyps)]
    return DemoResult(accuracy, time.perf_counter() - start, model_dir, examples)


def _clear_previous_run(out_dir: Path) -> None:
    """The demo always starts afresh: drop the checkpoints of an earlier demo run there."""
    if (out_dir / CONFIG_NAME).is_file():
        for name in ("checkpoints", "tokenizer", "metrics.jsonl"):
            path = out_dir / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
