"""The training loop: the paper's recipe (§5.3-§5.4) with accumulation, mixed precision,
crash-safe checkpoints, validation, early stopping and DDP.

The trainer knows nothing of the model, the data or the loss (minGPT style). It is given
a task (`aiayn.tasks.base.Task`: `loss(model, batch)`, `n_targets(batch)`, `validate(model)`,
`save_extras(model_dir)`), a learning-rate function of the update number, and
`train_data(epoch) -> Sequence[batch]`, a deterministic list of micro-batches for this
rank and epoch, so a checkpoint can record its position as (epoch, batch index) and a
resumed run continues with exactly the batches, RNG states and optimizer state the
uninterrupted run would have had.

Loss normalisation: each micro-batch contributes its SUMMED loss divided by the target
tokens of the whole effective batch (all `update_freq` micro-batches of the update, on all
ranks). DDP averages gradients over ranks, so the loss is also multiplied by the world
size. The learning rate is set once per update.

Progress is reported through an optional `progress(event)` callback (the `aiayn train`
command draws a bar with it); the library itself draws nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch import nn

from aiayn.config import OptimConfig
from aiayn.distributed import SINGLE, DistInfo, all_reduce, gather_objects, wrap_ddp
from aiayn.io import atomic_dir
from aiayn.metrics import higher_is_better
from aiayn.runtime import cpu_flags, native_bf16, resolve_precision
from aiayn.training import checkpoint as ckpt
from aiayn.training.average import average_checkpoints
from aiayn.training.config import RunConfig
from aiayn.training.metrics import MetricsWriter
from aiayn.training.schedule import adam

log = logging.getLogger(__name__)
MIN_LOSS_SCALE = 1e-4  # fp16: below this loss scale, overflowing updates count as non-finite (fairseq's --min-loss-scale)

EpochData = Callable[[int], Sequence[Any]]  # epoch -> this rank's micro-batches (each with .to(device))


@dataclass
class Progress:
    """What the `progress` callback receives after every update (and once at the start)."""

    step: int  # updates done
    total: Optional[int]  # max_updates, or None
    applied: bool  # this update changed the weights (False at the start and for skipped updates)
    postfix: dict = field(default_factory=dict)  # loss, lr, tok/s, ... on logging updates


class TrainingDiverged(RuntimeError):
    """Too many non-finite updates in a row; the weights were saved if they were still finite."""


@dataclass
class UpdateStats:
    loss: float  # Σ smoothed loss over the effective batch (all ranks)
    nll: float
    tokens: int
    grad_norm: float
    applied: bool


@dataclass
class FitResult:
    state: ckpt.TrainState
    stop_reason: str  # "max_updates" | "max_epochs" | "max_minutes" | "patience" | "signal" | "already_finished"
    last_valid: dict = field(default_factory=dict)


def check_precision(precision: str, device: torch.device) -> None:
    """train.precision must be one the device trains in: fp16's loss scaling is CUDA's."""
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("train.precision = 'fp16' needs a CUDA device; use 'bf16' on CPU")


class Trainer:
    """Trains `model` in place. Only rank 0 writes to `run_dir`.

    task: the loss, the validation metrics and the model directory's extras (see module doc).
    lr_at: update number (from 1) -> learning rate before the cooldown (`schedule.lr_function`).
    valid_data: micro-batches for the validation loss (rank 0 only).
    progress: called with a `Progress` after every update, on rank 0 only.
    """

    def __init__(
        self, model: nn.Module, task, optim: OptimConfig, run: RunConfig, run_dir: str | Path,
        train_data: EpochData, lr_at: Callable[[int], float], valid_data: Optional[Sequence[Any]] = None,
        dist: DistInfo = SINGLE, progress: Optional[Callable[[Progress], None]] = None,
    ):
        self.model, self.task, self.optim_cfg, self.run, self.dist = model, task, optim, run, dist
        self.run_dir, self.train_data, self.valid_data = Path(run_dir), train_data, valid_data
        self.lr_at, self.progress = lr_at, progress if dist.is_main else None
        self.device = next(model.parameters()).device
        self.precision = resolve_precision(self.run.precision, self.device)  # "auto" -> bf16 where native
        self.ckpt_root = self.run_dir / ckpt.CHECKPOINT_DIR
        self.ddp = wrap_ddp(model, self.device, getattr(task, "unused_parameters", False)) if dist.enabled else None
        self.optimizer = adam(model.parameters(), optim, lr_at(1), fused=True)  # one kernel per step
        self.scaler = self._make_scaler()
        self._warn_slow_bf16()
        self.state = ckpt.TrainState()
        self.metrics = MetricsWriter(self.run_dir, enabled=dist.is_main)
        self._signal: Optional[int] = None
        self._last_save_time = 0.0
        self._last_saved_step = -1
        self._epoch_batches = 0

    # -- setup ------------------------------------------------------------------------------
    def _make_scaler(self):
        check_precision(self.precision, self.device)
        return torch.amp.GradScaler("cuda") if self.precision == "fp16" else None

    def _warn_slow_bf16(self) -> None:
        if self.precision != "bf16" or self.device.type != "cpu" or not cpu_flags():
            return
        if not native_bf16(self.device):
            log.warning("train.precision = 'bf16' on a CPU without avx512_bf16/amx_bf16: bf16 matmuls are "
                        "emulated and much slower than fp32 here; consider train.precision = 'fp32'")

    def _autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def _set_lr(self) -> None:
        """The schedule at the next update, times the cooldown factor."""
        lr = self.lr_at(self.state.step + 1) * self._cooldown_factor()
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def _cooldown_factor(self) -> float:
        """1 until the last `run.cooldown` of the budget, then falling linearly to 0 at its end.

        The budget is whichever of max_updates, max_epochs and max_minutes runs out first
        (warmup-stable-decay, Hägele et al. 2024): a run stopped by the clock ends with a
        cooled-down model rather than one taken at a high learning rate.
        """
        if not self.run.cooldown:
            return 1.0
        left = 1.0 - self._budget_used()
        return min(1.0, max(left, 0.0) / self.run.cooldown)

    def _budget_used(self) -> float:
        run, s, used = self.run, self.state, [0.0]
        if run.max_updates:
            used.append(s.step / run.max_updates)
        if run.max_epochs:
            used.append((s.epoch + s.batch_index / max(self._epoch_batches, 1)) / run.max_epochs)
        if run.max_minutes:
            elapsed = all_reduce([s.elapsed], self.dist, op="max")[0]  # one clock, so ranks keep one lr
            used.append(elapsed / (60 * run.max_minutes))
        return max(used)

    def resume(self, path: str | Path) -> None:
        """Continue from checkpoint `path`: weights, optimizer, RNG, data position."""
        self.state = ckpt.load_checkpoint(path, self.model, self.optimizer, self.scaler, rank=self.dist.rank,
                                          world_size=self.dist.world_size)
        self._last_saved_step = self.state.step
        self.state.bad_updates = 0  # a resume is a new try (a run stopped as diverged saved its streak)
        if self.state.best_metric and self.state.best_metric != self.run.best_metric:
            log.warning("train.best_metric is now %r, the best checkpoint's score was of %r: the best is found afresh",
                        self.run.best_metric, self.state.best_metric)
            self.state.best_score, self.state.best_step, self.state.bad_validations = float("-inf"), 0, 0
        self.metrics.truncate_after(self.state.step)
        log.info("resumed from %s at update %d (epoch %d, batch %d)", path, self.state.step,
                 self.state.epoch, self.state.batch_index)

    # -- one update -------------------------------------------------------------------------
    def accumulate(self, group: Sequence[Any]) -> UpdateStats:
        """Forward/backward over the micro-batches of one update; gradients are left in .grad."""
        module = self.ddp if self.ddp is not None else self.model
        module.train()
        tokens = int(all_reduce([sum(self.task.n_targets(b) for b in group)], self.dist)[0])
        scale = self.dist.world_size / max(tokens, 1)
        loss_sum = nll_sum = 0.0
        for j, batch in enumerate(group):
            last = j == len(group) - 1
            sync = contextlib.nullcontext() if last or self.ddp is None else self.ddp.no_sync()
            with sync:
                with self._autocast():
                    sums = self.task.loss(module, batch.to(self.device))
                loss = sums.loss * scale
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            loss_sum += float(sums.loss.detach())
            nll_sum += float(sums.nll)
        loss_sum, nll_sum = all_reduce([loss_sum, nll_sum], self.dist)
        return UpdateStats(loss_sum, nll_sum, tokens, float("nan"), False)

    def update(self, group: Sequence[Any]) -> UpdateStats:
        """One optimizer update on `group`; non-finite updates are skipped (and counted)."""
        stats = self.accumulate(group)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = self.optim_cfg.clip_norm if self.optim_cfg.clip_norm > 0 else float("inf")
        stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        self._set_lr()  # on every rank, whichever branch follows (the cooldown may all-reduce the clock)
        if not math.isfinite(stats.loss):
            self.state.bad_updates += 1
            log.warning("update %d: non-finite loss (%s); skipped (%d in a row)", self.state.step + 1,
                        stats.loss, self.state.bad_updates)
            if self.scaler is not None:
                self.scaler.update()  # closes this update's unscale_ (lowering the scale on inf gradients)
        elif self.scaler is not None:
            self.scaler.step(self.optimizer)  # the scaler skips the step itself when the gradients overflowed
            self.scaler.update()  # and lowers the scale
            stats.applied = math.isfinite(stats.grad_norm)  # the norm of the unscaled gradients
            if not stats.applied and self.scaler.get_scale() < MIN_LOSS_SCALE:
                self.state.bad_updates += 1  # the scale cannot fall further usefully: count towards giving up
                log.warning("update %d: gradients overflow at loss scale %.2g; skipped (%d in a row)",
                            self.state.step + 1, self.scaler.get_scale(), self.state.bad_updates)
        elif not math.isfinite(stats.grad_norm):
            self.state.bad_updates += 1
            log.warning("update %d: non-finite gradient norm; skipped (%d in a row)", self.state.step + 1,
                        self.state.bad_updates)
        else:
            self.optimizer.step()
            stats.applied = True
        self.optimizer.zero_grad(set_to_none=True)
        if stats.applied:
            self.state.step += 1
            self.state.bad_updates = 0
        return stats

    # -- the loop ---------------------------------------------------------------------------
    def fit(self) -> FitResult:
        """Train until a budget in `run` is spent, patience runs out or a signal arrives.

        A resumed run whose budget is already spent changes nothing (no update, no save) and returns
        with stop_reason "already_finished"; its model directory is written only where a crash came
        between the last checkpoint and it (missing, or older than that checkpoint)."""
        self._t0 = time.monotonic() - self.state.elapsed
        if (done := self.finished()) is not None:
            log.info("the run already finished (%s) at update %d: nothing to do", done, self.state.step)
            if self.dist.is_main and self._model_dir_stale():
                log.warning("%s is missing or older than the last checkpoint (a crash between them): written now",
                            self.run_dir / ckpt.MODEL_DIR)
                self.write_model_dir()
            self.metrics.close()
            return FitResult(self.state, "already_finished")
        self._last_save_time = self._elapsed()
        self._window = _Window(self._elapsed())
        reason, last_valid = None, {}
        self._report(False)
        with self._signal_handlers():
            while reason is None:
                epoch = self.state.epoch
                batches = self.train_data(epoch)
                n = int(all_reduce([len(batches)], self.dist, op="min")[0])  # ranks stay in step
                if n == 0:
                    raise ValueError(f"epoch {epoch} has no training batches")
                if self.state.batch_index >= n:  # resumed with fewer batches an epoch (more processes): it is over
                    self.state.epoch, self.state.batch_index = epoch + 1, 0
                    reason = self._stop_reason()  # max_epochs may have been reached there
                    continue
                self._epoch_batches = n
                while reason is None and self.state.epoch == epoch:  # _after_update ends the epoch
                    i = self.state.batch_index
                    group = [batches[j] for j in range(i, min(i + self.run.update_freq, n))]
                    stats = self.update(group)
                    self.state.batch_index += len(group)
                    self._window.add(stats)
                    postfix = {}
                    last_valid = self._after_update(stats, n, postfix) or last_valid
                    self._report(stats.applied, postfix)
                    reason = self._stop_reason()
        self._finish(reason)
        return FitResult(self.state, reason, last_valid)

    def _save_diverged(self) -> str:
        """Save the weights of a run that diverged when they are finite (the skipped updates never reached
        them: bad batches leave them good), and say where a resume starts and what to do if it fails again."""
        if not self._weights_finite():
            return (f"The weights are no longer finite (an update made them so) and were not saved; the checkpoints "
                    f"in {self.ckpt_root} hold earlier ones")
        saved = self.save()  # None on ranks other than 0
        earlier = [p for p in ckpt.list_checkpoints(self.ckpt_root) if p != saved]
        if saved is None or not earlier:
            return f"The weights of update {self.state.step} are in {saved or self.ckpt_root}"
        return (f"The weights of update {self.state.step} are saved as {saved}; they are finite, but if a resume "
                f"from them diverges again at once, remove {saved.name} to resume from {earlier[-1].name}")

    def _after_update(self, stats: UpdateStats, n_batches: int, postfix: dict) -> dict:
        """Bookkeeping after an update: epoch end, logging, validation, checkpoints."""
        s, run, valid = self.state, self.run, {}
        s.elapsed = self._elapsed()
        if s.bad_updates >= run.max_bad_updates:
            raise TrainingDiverged(f"{s.bad_updates} non-finite updates in a row at update {s.step}; stopped. "
                                   f"{self._save_diverged()}. Lower the learning rate (optim.lr_factor), raise "
                                   "optim.warmup_steps or set optim.clip_norm.")
        epoch_done = s.batch_index >= n_batches
        if epoch_done:
            s.epoch, s.batch_index = s.epoch + 1, 0
        if stats.applied and s.step % run.log_every == 0:
            postfix.update(self._log_train())
        if (run.validate_every and stats.applied and s.step % run.validate_every == 0) or \
                (not run.validate_every and epoch_done):
            valid = self.validate()
        if self._save_due(stats.applied):
            if self._weights_finite():
                self.save()
            else:  # the checkpoints keep the last finite weights; the next updates are skipped, then stop
                log.warning("update %d: the weights are not finite; the checkpoint due now is not written", s.step)
        s.elapsed = self._elapsed()  # the validation's time counts toward max_minutes, saved or not
        return valid

    def _weights_finite(self) -> bool:
        """One host sync for all parameters (on a GPU, one per parameter would be a sync each)."""
        return bool(torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all())

    def finished(self) -> Optional[str]:
        """Why a resumed run has nothing left to do (its budget is spent), or None. All ranks must call."""
        return self._stop_reason() if self.state.step > 0 else None

    def _save_due(self, applied: bool) -> bool:
        run, s = self.run, self.state
        by_steps = applied and run.save_every_updates and s.step % run.save_every_updates == 0
        by_time = run.save_every_minutes and s.elapsed - self._last_save_time >= 60 * run.save_every_minutes
        return bool(all_reduce([float(bool(by_steps or by_time))], self.dist, op="max")[0])

    def _stop_reason(self) -> Optional[str]:
        run, s = self.run, self.state
        reasons = [
            ("signal", self._signal is not None),
            ("max_updates", bool(run.max_updates) and s.step >= run.max_updates),
            ("max_epochs", bool(run.max_epochs) and s.epoch >= run.max_epochs),
            ("max_minutes", bool(run.max_minutes) and s.elapsed >= 60 * run.max_minutes),
            ("patience", bool(run.patience) and s.bad_validations >= run.patience),
        ]
        flags = all_reduce([float(f) for _, f in reasons], self.dist, op="max")  # rank 0's clock decides too
        return next((name for (name, _), f in zip(reasons, flags) if f), None)

    def _finish(self, reason: str) -> None:
        log.info("training stopped (%s) at update %d, epoch %d, %.1f min", reason, self.state.step,
                 self.state.epoch, self.state.elapsed / 60)
        if self.state.step != self._last_saved_step:
            self.save()
        if self.dist.is_main:
            self.write_model_dir()
        self.metrics.close()

    # -- validation -------------------------------------------------------------------------
    @torch.no_grad()
    def validation_loss(self) -> dict:
        """Smoothed loss, NLL and perplexity per target token over `valid_data`."""
        self.model.eval()
        loss = nll = tokens = 0.0
        for batch in self.valid_data or []:
            with self._autocast():
                sums = self.task.loss(self.model, batch.to(self.device))
            loss, nll, tokens = loss + float(sums.loss), nll + float(sums.nll), tokens + sums.n_tokens
        tokens = max(tokens, 1)
        return {"loss": loss / tokens, "nll": nll / tokens, "ppl": math.exp(min(nll / tokens, 50.0))}

    def validate(self) -> dict:
        """Rank 0 computes validation metrics; every rank learns whether they improved."""
        row: dict = {}
        if self.dist.is_main and self.valid_data:
            t = time.monotonic()
            row = self.validation_loss()
            with self._autocast():
                row.update(self.task.validate(self.model))
            extra = "".join(f" {k} {v:.2f}" for k, v in row.items() if k not in ("loss", "nll", "ppl"))
            log.info("valid at update %d: loss %.4f nll %.4f ppl %.2f%s (%.1fs)", self.state.step, row["loss"],
                     row["nll"], row["ppl"], extra, time.monotonic() - t)
            self.metrics.write({"step": self.state.step, "epoch": self.state.epoch, "split": "valid",
                                **row, "lr": self._applied_lr(), "time": self._elapsed()})
        known = float(self.run.best_metric in row)
        has_row, known, score = all_reduce([float(bool(row)), known, self._score(row)], self.dist)  # rank 0's values
        if not has_row:
            return row
        if not known:  # raised on every rank, so that none waits for the others
            raise ValueError(f"train.best_metric = {self.run.best_metric!r}, but validation gives only "
                             f"{', '.join(sorted(row)) or 'nll, loss, ppl and the task metrics (on rank 0)'}")
        if score > self.state.best_score:
            self.state.best_score, self.state.best_step, self.state.bad_validations = score, self.state.step, 0
            self.state.best_metric = self.run.best_metric
            self.save(ckpt.BEST)
        else:
            self.state.bad_validations += 1
        return row

    def _score(self, row: dict) -> float:
        """train.best_metric in `row`, as a score where higher is better (the task's `lower_is_better`
        names the metrics where the smaller value wins)."""
        metric = self.run.best_metric
        if metric not in row:
            return 0.0  # no validation on this rank, or an unknown metric (`validate` raises, on every rank)
        return row[metric] if higher_is_better(metric, getattr(self.task, "lower_is_better", ())) else -row[metric]

    # -- checkpoints ------------------------------------------------------------------------
    def save(self, name: Optional[str] = None) -> Optional[Path]:
        """Checkpoint now (all ranks must call: RNG states are gathered); rank 0 writes."""
        rng = gather_objects(ckpt.capture_rng(), self.dist)
        self.state.elapsed = self._elapsed() if hasattr(self, "_t0") else self.state.elapsed
        if name is None:
            self._last_save_time, self._last_saved_step = self.state.elapsed, self.state.step
        if not self.dist.is_main:
            return None
        path = ckpt.save_checkpoint(self.ckpt_root, name or ckpt.checkpoint_name(self.state.step), self.model,
                                    self.optimizer, self.state, rng, self.scaler, extras=self.task.save_extras)
        if name is None:
            ckpt.prune_checkpoints(self.ckpt_root, self.run.keep_last)
        return path

    def write_model_dir(self) -> Path:
        """RUN_DIR/model: config + weights + the task's extras. The weights are the mean of the last
        `average_last` checkpoints (§6.1), or with `train.final = "best"` the best validation checkpoint."""
        out = self.run_dir / ckpt.MODEL_DIR
        chosen = self._final_checkpoints()
        model = average_checkpoints(chosen) if chosen else self.model
        if chosen:
            log.info("final model = mean of %d checkpoint(s): %s", len(chosen), ", ".join(p.name for p in chosen))
        with atomic_dir(out) as tmp:  # a server reading the directory sees the old model or the new one
            model.save_pretrained(tmp)
            self.task.save_extras(tmp)
        return out

    def _model_dir_stale(self) -> bool:
        """Whether RUN_DIR/model is missing or older than the newest checkpoint (each is written by a rename)."""
        out, last = self.run_dir / ckpt.MODEL_DIR, ckpt.latest_checkpoint(self.ckpt_root)
        return not out.is_dir() or (last is not None and out.stat().st_mtime_ns < last.stat().st_mtime_ns)

    def _final_checkpoints(self) -> list[Path]:
        """The checkpoints the final model comes from; empty = the weights in memory."""
        best = self.ckpt_root / ckpt.BEST
        if self.run.final == "best":
            if best.is_dir():
                return [best]
            log.warning("train.final = 'best', but no validation ran: the final model is the last weights")
            return []
        last = ckpt.list_checkpoints(self.ckpt_root)[-self.run.average_last:]
        if len(last) < self.run.average_last:  # a run shorter than the saves it was to average
            log.warning("train.average_last = %d, but %d checkpoint(s) are there to average", self.run.average_last,
                        len(last))
        return last if self.run.average_last > 1 else []

    # -- feedback ---------------------------------------------------------------------------
    def _applied_lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _log_train(self) -> dict:
        """Write a train row of metrics.jsonl; returns what a progress bar shows of it."""
        row = self._window.flush(self._elapsed())
        row.update(step=self.state.step, epoch=self.state.epoch, split="train", lr=self._applied_lr(),
                   time=self._elapsed())
        self.metrics.write(row)
        postfix = {"loss": f"{row['loss']:.3f}", "lr": f"{row['lr']:.2e}", "tok/s": f"{row['tokens_per_s']:.0f}"}
        if self.run.max_minutes:
            postfix["left"] = f"{max(0.0, self.run.max_minutes - self._elapsed() / 60):.1f}m"
        return postfix

    def _report(self, applied: bool, postfix: Optional[dict] = None) -> None:
        if self.progress is not None:
            self.progress(Progress(self.state.step, self.run.max_updates or None, applied, postfix or {}))

    @contextlib.contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        """SIGINT/SIGTERM: finish the current update, checkpoint, exit cleanly. A second
        signal interrupts at once."""
        def handler(signum, frame):
            if self._signal is not None:
                raise KeyboardInterrupt
            self._signal = signum
            log.warning("received %s: saving a checkpoint after this update", signal.Signals(signum).name)

        try:
            old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: no handlers
            yield
            return
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class _Window:
    """Sums of the train stats since the last log row."""

    def __init__(self, t: float):
        self.t, self.loss, self.nll, self.tokens = t, 0.0, 0.0, 0

    def add(self, stats: UpdateStats) -> None:
        if math.isfinite(stats.loss):
            self.loss, self.nll, self.tokens = self.loss + stats.loss, self.nll + stats.nll, self.tokens + stats.tokens

    def flush(self, now: float) -> dict:
        n = max(self.tokens, 1)
        row = {"loss": self.loss / n, "nll": self.nll / n, "ppl": math.exp(min(self.nll / n, 50.0)),
               "tokens_per_s": self.tokens / max(now - self.t, 1e-9)}
        self.__init__(now)
        return row
