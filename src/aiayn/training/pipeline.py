"""From a `TrainConfig` to a trained model directory. This module only wires: the task
prepares the data and says the loss; the model registry builds the model; the trainer trains.

    run_dir/config.toml      the resolved config (read back by --resume)
    run_dir/tokenizer/       the vocabulary, trained once (rank 0) and reused on resume
    run_dir/checkpoints/     see aiayn.training.checkpoint
    run_dir/metrics.jsonl    see aiayn.training.metrics
    run_dir/model/           the final self-contained model: config, weights, tokenizer
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from aiayn.models import build_model
from aiayn.runtime import resolve_device, seed_everything
from aiayn.tasks import build_task
from aiayn.training import checkpoint as ckpt
from aiayn.training.config import CONFIG_NAME, TrainConfig, load_config, save_config
from aiayn.training.distributed import DistInfo, init_from_env, shutdown
from aiayn.training.schedule import lr_function
from aiayn.training.trainer import FitResult, Progress, Trainer

log = logging.getLogger(__name__)


def prepare_run_dir(cfg: TrainConfig, resume: bool) -> Path:
    run_dir = Path(cfg.train.run_dir)
    if not resume and ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR) is not None:
        raise ValueError(f"{run_dir} already holds checkpoints; use --resume {run_dir} or another train.run_dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def _device_type(name: str) -> str:
    return "cuda" if name.startswith("cuda") or (name == "auto" and torch.cuda.is_available()) else "cpu"


def train(cfg: TrainConfig, resume: bool = False, dist: Optional[DistInfo] = None,
          progress: Optional[Callable[[Progress], None]] = None) -> FitResult:
    """Train per `cfg` into `cfg.train.run_dir`; with `resume`, continue from its last checkpoint.
    `progress` is the trainer's callback (the command draws a bar with it)."""
    run = cfg.train
    dist = dist or init_from_env(_device_type(run.device))
    try:
        device = resolve_device(run.device, dist.local_rank)
        if run.num_threads:
            torch.set_num_threads(run.num_threads)
        run_dir = prepare_run_dir(cfg, resume) if dist.is_main else Path(run.run_dir)
        if dist.is_main:
            save_config(cfg, run_dir)
        seed_everything(run.seed)
        task = build_task(cfg)
        task.prepare(run_dir, dist)
        model_type, model_cfg = task.model_spec()
        seed_everything(run.seed)  # the same initial weights whatever the data preparation drew
        model = build_model(model_type, model_cfg).to(device)
        log.info("model: %s, %s parameters (%s)", model_type, f"{model.num_parameters():,}", cfg.model.preset)
        lr_at = lr_function(run.schedule, model_cfg.d_model, cfg.optim.warmup_steps, cfg.optim.lr_factor)
        trainer = Trainer(model, task, cfg.optim, run, run_dir, task.train_data(dist), lr_at,
                          valid_data=task.valid_data(), dist=dist, progress=progress)
        if resume:
            last = ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR)
            if last is None:
                raise FileNotFoundError(f"{run_dir / ckpt.CHECKPOINT_DIR}: no checkpoint to resume from")
            trainer.resume(last)
        return trainer.fit()
    finally:
        shutdown()


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config saved in `run_dir`, with `--set` overrides (e.g. a larger budget)."""
    path = Path(run_dir) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; is {run_dir} a training run directory?")
    return load_config(path, [f"train.run_dir={run_dir}", *overrides])


def evaluate_test(cfg: TrainConfig, progress: Optional[Callable[[int], None]] = None) -> Optional[dict]:
    """The task's test scores of run_dir/model (for translation: sacreBLEU with `[decode]` settings)."""
    task = build_task(cfg)
    model_dir = Path(cfg.train.run_dir) / "model"
    return task.test(model_dir, resolve_device(cfg.train.device), progress)
