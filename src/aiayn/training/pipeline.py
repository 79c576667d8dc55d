"""From a `TrainConfig` to a trained model directory. This module only wires: the task
prepares the data and says the loss; the model registry builds the model; the trainer trains.

    run_dir/config.toml      the resolved config (read back by --resume)
    run_dir/tokenizer/       the vocabulary, trained once (rank 0) and reused on resume
    run_dir/checkpoints/     see aiayn.training.checkpoint
    run_dir/metrics.jsonl    see aiayn.training.metrics
    run_dir/model/           the final self-contained model: config, weights, tokenizer
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from aiayn.config import PRESETS, ConfigError, training_only_names
from aiayn.data.tokenizer import TOKENIZER_DIR, load_tokenizers
from aiayn.distributed import DistInfo, init_from_env, shutdown
from aiayn.io import exclusive_lock, read_tensors, restore_replaced
from aiayn.models import build_model, read_config
from aiayn.models.base import CONFIG_FILE, WEIGHTS_FILE
from aiayn.runtime import no_cudnn_attention, preserved_process_state, resolve_device, seed_everything
from aiayn.tasks import build_task
from aiayn.training import checkpoint as ckpt
from aiayn.training.config import (CONFIG_NAME, VOCABULARY_KEYS, ModelSpec, TrainConfig, load_config, save_config,
                                   string_override)
from aiayn.training.metrics import METRICS_FILE
from aiayn.training.schedule import lr_function
from aiayn.training.trainer import FitResult, Progress, Trainer, check_precision

log = logging.getLogger(__name__)


LOCK_FILE = ".lock"  # the first thing a run makes in its directory, and left there
RUN_ENTRIES = (CONFIG_NAME, METRICS_FILE, ckpt.CHECKPOINT_DIR, ckpt.MODEL_DIR, TOKENIZER_DIR)  # what a run replaces


def check_run_dir(cfg: TrainConfig, resume: bool) -> Path:
    run_dir = Path(cfg.train.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"train.run_dir {run_dir} is a file, not a directory")
    if not resume and ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR) is not None:
        raise ValueError(f"{run_dir} already holds checkpoints; use --resume {run_dir} or another train.run_dir")
    if not resume and run_dir.is_dir() and not (run_dir / LOCK_FILE).exists():
        taken = [name for name in RUN_ENTRIES if (run_dir / name).exists()]
        if taken:  # no run has held it: those are the user's (a recipe named config.toml, a model/ of theirs)
            raise FileExistsError(f"{run_dir}: not a run directory, and it holds {', '.join(taken)}, which a run "
                                  "writes; choose another train.run_dir")
    return run_dir


def _device_type(name: str) -> str:
    return "cuda" if name.startswith("cuda") or (name == "auto" and torch.cuda.is_available()) else "cpu"


@contextlib.contextmanager
def _run_lock(run_dir: Path, dist: DistInfo):
    """Rank 0 holds an exclusive lock on run_dir for the whole run: two trainings never mix their work."""
    if not dist.is_main:
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(run_dir / LOCK_FILE, f"run directory {run_dir}"):
        yield


@preserved_process_state()
def train(cfg: TrainConfig, resume: bool = False, dist: Optional[DistInfo] = None,
          progress: Optional[Callable[[Progress], None]] = None) -> FitResult:
    """Train per `cfg` into `cfg.train.run_dir`; with `resume`, continue from its last good checkpoint.

    Everything is validated before anything is written: the run directory is locked, a resume
    must keep the model's shape and find a checkpoint that loads, and config.toml is written
    once the run is set up. `progress` is the trainer's callback (the command draws a bar with it).
    The thread count and global random states it sets are the caller's again when it returns or raises
    (`runtime.preserved_process_state`), and so is cuDNN's attention switch (`runtime.no_cudnn_attention`).
    """
    run = cfg.train
    dist = dist or init_from_env(_device_type(run.device))
    try:
        device = resolve_device(run.device, dist.local_rank)
        check_precision(run.precision, device)  # before the data is prepared, which may take long
        if run.num_threads:
            torch.set_num_threads(run.num_threads)
        run_dir = check_run_dir(cfg, resume)
        with _run_lock(run_dir, dist), no_cudnn_attention(device):
            if resume:
                check_resumable(run_dir, cfg)
                found = resumable_checkpoints(run_dir, dist)
            elif dist.is_main:
                set_aside_stale_run(run_dir)
            seed_everything(run.seed)
            starting = bool(run.init_from) and not resume
            if starting:
                check_init_from(run.init_from)  # before the data is prepared, which may take long
            task = build_task(cfg)
            task.prepare(run_dir, dist, fresh=not resume)
            model_type, model_cfg = task.model_spec()
            if starting:
                model_type, model_cfg = started_architecture(run.init_from, model_type, model_cfg, cfg.model)
            seed_everything(run.seed)  # the same initial weights whatever the data preparation drew
            model = build_model(model_type, model_cfg).to(device)
            if starting:
                vocabulary = task.tokenizers  # a text task's, set by prepare; None for patches
                load_matching(model, run.init_from, vocabulary)
            log.info("model: %s, d_model %d, layers %s, %s parameters", model_type, model_cfg.width, model_cfg.depth,
                     f"{model.num_parameters():,}")
            lr_at = lr_function(run.schedule, model_cfg.width, cfg.optim.warmup_steps, cfg.optim.lr_factor)
            trainer = Trainer(model, task, cfg.optim, run, run_dir, task.train_data(dist), lr_at,
                              valid_data=task.valid_data(), dist=dist, progress=progress)
            if resume:
                resume_from_last_good(trainer, found, run_dir)
            finished = trainer.finished()  # a collective: every rank asks
            if dist.is_main and finished is None:  # a finished run keeps its config as it was
                save_config(cfg, run_dir)
            return trainer.fit()
    finally:
        shutdown()


STALE = (METRICS_FILE, "tensorboard", f"{ckpt.CHECKPOINT_DIR}/{ckpt.BEST}")  # what a run writes before a checkpoint


def set_aside_stale_run(run_dir: Path) -> None:
    """A fresh start in a directory without checkpoints (`check_run_dir`) may find what a run that crashed
    before its first checkpoint wrote: its metrics rows (new ones would follow them, for the same updates),
    TensorBoard events and best checkpoint. They are moved to `RUN_DIR/stale/`, replacing an older set."""
    found = [run_dir / name for name in STALE if (run_dir / name).exists()]
    if not found:
        return
    aside = run_dir / "stale"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    for path in found:
        os.replace(path, aside / path.name)
    log.warning("%s: a run without checkpoints left %s; moved to %s", run_dir, ", ".join(p.name for p in found), aside)


def check_init_from(model_dir: str | Path) -> None:
    """train.init_from names a model directory: config.json and its weights."""
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (Path(model_dir) / name).is_file():
            raise FileNotFoundError(f"{Path(model_dir) / name}: train.init_from needs a model directory")


def started_architecture(model_dir: str | Path, model_type: str, built, spec: ModelSpec):
    """(model_type, config) of a run started from `model_dir`: that directory's architecture, every field
    that shapes its function (BERT's embedding LayerNorm, token types and epsilon come with an imported
    BERT), with this run's vocabulary size and head (the config class's
    `head_fields`: a classifier's n_classes and pooler, from the task and the recipe); its training-only
    fields (dropout) are the directory's unless the recipe sets them. A body field that
    the recipe sets (or its preset sets) to another value than the directory's is an error naming it."""
    saved_type, saved = read_config(model_dir)
    if saved_type != model_type:
        raise ConfigError(f"train.init_from {model_dir}: its model is {saved_type}, but this run's model.type is "
                          f"{model_type!r}; set model.type = {saved_type!r}")
    said = set(dict(spec.overrides)) | (set(PRESETS.get(spec.preset, {})) if spec.has_presets else set())
    own = (training_only_names(built) & said) | set(getattr(built, "head_fields", ())) | set(VOCABULARY_KEYS)
    clash = sorted(k for k in said - own - training_only_names(built) if getattr(built, k) != getattr(saved, k))
    if clash:
        raise ConfigError(f"train.init_from {model_dir}: model.{clash[0]} = {getattr(built, clash[0])!r}, but the model "
                          f"there has {getattr(saved, clash[0])!r}; a run started from a model directory takes its "
                          f"architecture: drop model.{clash[0]} from the recipe")
    names = {f.name for f in dataclasses.fields(saved)}
    return saved_type, dataclasses.replace(saved, **{k: getattr(built, k) for k in own if k in names})


def load_matching(model, model_dir: str | Path, tokenizers=None) -> None:
    """Start `model` from the weights of `model_dir` that have its names and shapes (a classifier
    from an MLM-pretrained body); the rest keep their fresh initialisation.

    An embedding row means a piece, so the vocabularies are compared piece by piece (`tokenizers`:
    the run's `TokenizerPair`; None for a task without one, e.g. image patches). One of the run's
    size with other pieces is refused, saying how many ids agree: rows are not remapped. One of
    another size keeps fresh embeddings: that, and every tensor whose shape differs, is a warning
    naming what was not loaded. Tensors the saved model lacks (a new head) are logged at INFO.
    """
    path = Path(model_dir) / WEIGHTS_FILE
    check_init_from(model_dir)
    notes = _check_vocabulary(Path(model_dir), tokenizers) if tokenizers is not None else []
    saved, own = read_tensors(path), model.state_dict()
    used = {k: v for k, v in saved.items() if k in own and own[k].shape == v.shape}
    if not used:
        raise ValueError(f"{path}: no weight matches this model's names and shapes")
    model.load_state_dict(used, strict=False)
    reshaped = sorted(k for k in saved if k in own and k not in used)
    if reshaped:
        log.warning("init_from %s: %s%d tensors not loaded, their shapes differ; they keep their fresh "
                    "initialisation: %s", model_dir, "".join(f"{n}; " for n in notes), len(reshaped),
                    ", ".join(f"{k} {tuple(saved[k].shape)} -> {tuple(own[k].shape)}" for k in reshaped))
    unused = sorted(k for k in saved if k not in own)
    if unused:
        log.warning("init_from %s: %d tensors of it are not in this model and are not used: %s", model_dir,
                    len(unused), ", ".join(unused))
    loaded = {own[k].data_ptr() for k in used}  # a tied tensor (shared embeddings) is saved under one name
    missing = sorted(k for k in own if k not in saved and own[k].data_ptr() not in loaded)
    log.info("init_from %s: %d tensors loaded; not in it, kept fresh: %s", model_dir, len(used),
             ", ".join(missing) or "none")


def _check_vocabulary(model_dir: Path, run_tokenizers) -> list[str]:
    """Refuse a side of `model_dir`'s vocabulary that has the run's size but other pieces; return
    a note for each side of another size."""
    try:
        theirs = load_tokenizers(model_dir)
    except FileNotFoundError as e:
        raise ValueError(f"train.init_from {model_dir}: cannot compare its vocabulary with the run's ({e})") from None
    notes = []
    for side in ("src",) if theirs.joint and run_tokenizers.joint else ("src", "tgt"):
        old, new = getattr(theirs, side), getattr(run_tokenizers, side)
        if old.vocab_size != new.vocab_size:
            notes.append(f"its {side} vocabulary has {old.vocab_size:,} pieces, this run's {new.vocab_size:,}")
            continue
        old_pieces, new_pieces = old.pieces(range(old.vocab_size)), new.pieces(range(new.vocab_size))
        if old_pieces != new_pieces:
            agree = sum(a == b for a, b in zip(old_pieces, new_pieces))
            raise ValueError(
                f"train.init_from {model_dir}: its {side} vocabulary has this run's size but other pieces: "
                f"only {agree:,} of {old.vocab_size:,} ids mean the same piece. Train with its vocabulary "
                f'(data.tokenizer = "{model_dir}") or drop train.init_from')
    return notes


def resumable_checkpoints(run_dir: Path, dist: DistInfo) -> list[Path]:
    """The checkpoints a resume may start from, oldest first: the periodic ones, else the best one (a run
    killed after a validation, before its first periodic save). None is an error, raised before any work.
    A best/ or model/ that a crash left moved aside while it was being replaced is put back first."""
    best = run_dir / ckpt.CHECKPOINT_DIR / ckpt.BEST
    if dist.is_main:
        for replaced in (best, run_dir / ckpt.MODEL_DIR):
            restore_replaced(replaced)
    found = ckpt.list_checkpoints(run_dir / ckpt.CHECKPOINT_DIR)
    if not found and best.is_dir():
        log.warning("no periodic checkpoint in %s; resuming from the best one, %s", best.parent, best)
        found = [best]
    if not found:
        raise FileNotFoundError(f"{run_dir / ckpt.CHECKPOINT_DIR}: no checkpoint to resume from")
    return found


def resume_from_last_good(trainer: Trainer, found: list[Path], run_dir: Path) -> None:
    """Load the newest of `found` that loads. A damaged newer one is skipped with a warning and, once an
    older one has loaded, moved aside (kept as `damaged-ckpt_N`): listed still, it would be averaged into
    the final model, or be the newest checkpoint of the continued run, from the abandoned one."""
    skipped = []
    for path in reversed(found):
        try:
            trainer.resume(path)
        except (ValueError, FileNotFoundError) as e:
            log.warning("cannot resume from %s (%s); trying the checkpoint before it", path, e)
            skipped.append(path)
            continue
        if trainer.dist.is_main:
            for damaged in skipped:
                aside = damaged.with_name(f"damaged-{damaged.name}")
                shutil.rmtree(aside, ignore_errors=True)  # one of an earlier fallback
                os.replace(damaged, aside)
                log.warning("moved %s aside to %s: the run continues from %s", damaged, aside.name, path.name)
        return
    raise ValueError(f"{run_dir / ckpt.CHECKPOINT_DIR}: no checkpoint loads ({len(found)} tried)")


def check_resumable(run_dir: Path, cfg: TrainConfig) -> None:
    """A resumed run keeps its model's shape: a changed shape field is an error naming it."""
    saved = load_config(Path(run_dir) / CONFIG_NAME)
    if cfg.model.type != saved.model.type:
        raise ValueError(f"cannot resume {run_dir} as model.type {cfg.model.type!r}: it was trained as {saved.model.type!r}")
    built = saved.model.build(64, 64)
    changeable = training_only_names(built)  # dropout, the ponder cost: what averaging may differ in too
    before, after = built.to_dict(), cfg.model.build(64, 64).to_dict()
    changed = [k for k in before if k not in changeable and before[k] != after[k]]
    if changed:
        k = changed[0]
        raise ValueError(f"cannot resume {run_dir} with model.{k} = {after[k]!r}: the run was trained with "
                         f"{before[k]!r}, and model shape fields cannot change on resume")
    if cfg.task != saved.task:
        raise ValueError(f"cannot resume {run_dir} as task {cfg.task!r}: it was trained as {saved.task!r}")


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config saved in `run_dir`, with `--set` overrides (e.g. a larger budget)."""
    path = Path(run_dir) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; is {run_dir} a training run directory?")
    return load_config(path, [string_override("train.run_dir", run_dir), *overrides])


def evaluate_test(cfg: TrainConfig, progress: Optional[Callable[..., None]] = None) -> Optional[dict]:
    """The task's test scores of run_dir/model (e.g. sacreBLEU with the `[decode]` settings)."""
    task = build_task(cfg)
    model_dir = Path(cfg.train.run_dir) / ckpt.MODEL_DIR
    return task.test(model_dir, resolve_device(cfg.train.device), progress)
