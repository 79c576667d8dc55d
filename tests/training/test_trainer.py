import copy
import math
import random

import pytest
import torch

from aiayn.config import OptimConfig
from aiayn.models.transformer import Transformer
from aiayn.training import checkpoint as ckpt
from aiayn.training.config import RunConfig
from aiayn.tasks.loss import label_smoothed_loss
from aiayn.plots.curves import read_metrics
from aiayn.training.trainer import TrainingDiverged

from training_helpers import make_trainer, batches, make_batch, reverse_pairs, tiny_config

OPTIM = OptimConfig(warmup_steps=10, lr_factor=2.0)


def run_config(**kw) -> RunConfig:
    kw.setdefault("max_updates", 4)
    return RunConfig(**{"progress": False, "log_every": 1, **kw})


def epoch_data(n_batches=5, per_batch=3):
    data = batches(n_batches, per_batch, seed=0)

    def for_epoch(epoch):  # a deterministic shuffle per epoch, like the token bucket sampler
        order = list(range(len(data)))
        random.Random(epoch).shuffle(order)
        return [data[i] for i in order]
    return for_epoch


def test_accumulated_gradient_equals_one_big_batch(tmp_path):
    pairs = reverse_pairs(9, seed=3)
    micro = [make_batch(pairs[0:2]), make_batch(pairs[2:7]), make_batch(pairs[7:9])]
    model = Transformer(tiny_config(dropout=0.0))
    reference = copy.deepcopy(model)
    trainer = make_trainer(model, OPTIM, run_config(update_freq=3), tmp_path, lambda e: micro)
    stats = trainer.accumulate(micro)

    big = make_batch(pairs)
    sums = label_smoothed_loss(reference(big.src, big.tgt_in), big.tgt_out, OPTIM.label_smoothing, 0)
    (sums.loss / big.n_tgt_tokens).backward()
    assert stats.tokens == big.n_tgt_tokens
    assert stats.loss == pytest.approx(float(sums.loss.detach()), rel=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_a_position_past_the_epochs_batches_starts_the_next_epoch_instead_of_an_empty_update(tmp_path):
    """A run resumed with more processes has fewer batches an epoch on each: where it stood may be past them."""
    trainer = make_trainer(Transformer(tiny_config()), OPTIM, run_config(max_updates=1), tmp_path, epoch_data(6))
    trainer.state.epoch, trainer.state.batch_index = 2, 9
    trainer.fit()
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["split"] == "train"]
    assert trainer.state.step == 1 and (trainer.state.epoch, trainer.state.batch_index) == (3, 1)
    assert rows[-1]["tokens_per_s"] > 0 and math.isfinite(rows[-1]["loss"])  # the one update had data


def test_schedule_steps_once_per_update(tmp_path):
    model = Transformer(tiny_config())
    trainer = make_trainer(model, OPTIM, run_config(update_freq=3, max_updates=2), tmp_path, epoch_data(6))
    trainer.fit()
    assert trainer.state.step == 2
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(trainer.lr_at(2))
    assert trainer.state.batch_index == 0 and trainer.state.epoch == 1  # 6 micro-batches = 2 updates = 1 epoch


def test_cooldown_falls_linearly_to_zero_over_the_end_of_the_budget(tmp_path):
    trainer = make_trainer(Transformer(tiny_config()), OPTIM, run_config(max_updates=10, cooldown=0.4), tmp_path,
                      epoch_data(6))
    applied = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: (applied.append(trainer.optimizer.param_groups[0]["lr"]), step())
    trainer.fit()
    # update k (1..10) starts with k-1 of 10 updates spent; the last 40% scale by (1 - spent) / 0.4
    factors = [min(1.0, (1 - (k - 1) / 10) / 0.4) for k in range(1, 11)]
    assert factors[-4:] == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert applied == pytest.approx([trainer.lr_at(k) * f for k, f in zip(range(1, 11), factors)])


def test_cooldown_follows_the_clock(tmp_path):
    trainer = make_trainer(Transformer(tiny_config()), OPTIM, run_config(max_updates=0, max_minutes=10.0, cooldown=0.5),
                      tmp_path, epoch_data(6))
    for minutes, factor in [(0.0, 1.0), (5.0, 1.0), (7.5, 0.5), (9.0, 0.2), (12.0, 0.0)]:
        trainer.state.elapsed = 60 * minutes
        assert trainer._cooldown_factor() == pytest.approx(factor)


def _train(run_dir, max_updates, resume=None, **kw):
    torch.manual_seed(0)
    model = Transformer(tiny_config(dropout=0.1, attention_dropout=0.1))
    trainer = make_trainer(model, OPTIM, run_config(max_updates=max_updates, update_freq=2, **kw), run_dir, epoch_data())
    if resume is not None:
        trainer.resume(resume)
    result = trainer.fit()
    return model, trainer, result


def test_resume_is_exact(tmp_path):
    K = 4  # 5 micro-batches per epoch, 2 per update (last update: 1): K lands mid-epoch
    straight, _, _ = _train(tmp_path / "a", 2 * K)
    _, first, _ = _train(tmp_path / "b", K)
    assert (first.state.epoch, first.state.batch_index) == (1, 2)  # 3 updates per epoch
    resumed, second, _ = _train(tmp_path / "b", 2 * K, resume=ckpt.latest_checkpoint(tmp_path / "b" / "checkpoints"))
    assert second.state.step == 2 * K
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=name)
    steps = [r["step"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, 2 * K + 1))


def test_checkpoints_keep_last_and_final_model_dir(tmp_path):
    _, trainer, result = _train(tmp_path, 6, save_every_updates=1, keep_last=3, average_last=2)
    names = [p.name for p in ckpt.list_checkpoints(tmp_path / "checkpoints")]
    assert names == ["ckpt_00000004", "ckpt_00000005", "ckpt_00000006"]
    assert result.stop_reason == "max_updates"
    model = Transformer.from_pretrained(tmp_path / "model")
    a = Transformer.from_pretrained(tmp_path / "checkpoints" / names[1])
    b = Transformer.from_pretrained(tmp_path / "checkpoints" / names[2])
    for p, pa, pb in zip(model.parameters(), a.parameters(), b.parameters()):
        torch.testing.assert_close(p, (pa + pb) / 2)


def test_validation_rows_best_checkpoint_and_patience(tmp_path):
    model = Transformer(tiny_config())
    valid = batches(2, 4, seed=9)
    trainer = make_trainer(model, OPTIM, run_config(max_updates=100, validate_every=2, patience=1), tmp_path,
                      epoch_data(), valid_data=valid, metrics=lambda m: {"bleu": 12.5})
    trainer.state.best_score = float("inf")  # nothing can beat it: the first validation exhausts patience
    result = trainer.fit()
    assert result.stop_reason == "patience" and trainer.state.step == 2
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["split"] == "valid"]
    assert rows[0]["bleu"] == 12.5 and rows[0]["ppl"] == pytest.approx(math.exp(rows[0]["nll"]))
    expected = {"step", "epoch", "split", "loss", "nll", "ppl", "lr", "time", "bleu"}
    assert set(rows[0]) == expected
    train_row = next(r for r in read_metrics(tmp_path / "metrics.jsonl") if r["split"] == "train")
    assert set(train_row) == {"step", "epoch", "split", "loss", "nll", "ppl", "lr", "tokens_per_s", "time"}


def test_validation_saves_best(tmp_path):
    model = Transformer(tiny_config())
    trainer = make_trainer(model, OPTIM, run_config(max_updates=2, validate_every=1), tmp_path, epoch_data(),
                      valid_data=batches(1, 4, seed=9))
    trainer.fit()
    assert (tmp_path / "checkpoints" / "best" / ckpt.STATE_FILE).is_file()
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["split"] == "valid"]
    lowest = min(rows, key=lambda r: r["nll"])  # the default: the lowest validation NLL wins
    assert len(rows) == 2 and trainer.state.best_step == lowest["step"]
    assert trainer.state.best_score == pytest.approx(-lowest["nll"])


def test_best_by_a_task_metric_becomes_the_final_model(tmp_path):
    """best_metric = "accuracy" (higher wins) picks the first validation here, whatever the loss does;
    final = "best" makes that checkpoint the model directory."""
    falling = iter([90.0, 80.0, 70.0])
    trainer = make_trainer(Transformer(tiny_config()), OPTIM,
                           run_config(max_updates=3, validate_every=1, best_metric="accuracy", final="best"),
                           tmp_path, epoch_data(), valid_data=batches(1, 4, seed=9),
                           metrics=lambda m: {"accuracy": next(falling)})
    trainer.fit()
    assert trainer.state.best_step == 1 and trainer.state.best_score == 90.0
    final = Transformer.from_pretrained(tmp_path / "model")
    best = Transformer.from_pretrained(tmp_path / "checkpoints" / ckpt.BEST)
    for p, q in zip(final.parameters(), best.parameters()):
        torch.testing.assert_close(p, q)
    assert not all(torch.equal(p, q.cpu()) for p, q in zip(final.parameters(), trainer.model.parameters()))


@pytest.mark.parametrize("lower, best_step, best_score", [(("word_error",), 2, -10.0), ((), 1, 30.0)])
def test_the_task_says_which_metrics_are_lower_is_better(tmp_path, lower, best_step, best_score):
    # an error rate the task lists in lower_is_better: the lowest validation (the second) is the best;
    # a metric it does not list counts as higher-is-better (the first)
    errors = iter([30.0, 10.0, 20.0])
    trainer = make_trainer(Transformer(tiny_config()), OPTIM,
                           run_config(max_updates=3, validate_every=1, best_metric="word_error"),
                           tmp_path, epoch_data(), valid_data=batches(1, 4, seed=9),
                           metrics=lambda m: {"word_error": next(errors)}, lower_is_better=lower)
    trainer.fit()
    assert trainer.state.best_step == best_step and trainer.state.best_score == best_score


def test_each_task_lists_its_lower_is_better_metrics_among_its_metrics():
    from aiayn.tasks import TASKS, task_class

    for name in TASKS:
        task = task_class(name)
        assert set(getattr(task, "lower_is_better", ())) <= set(task.metrics), name
    assert set(task_class("qa").lower_is_better) == {"babi_mean_error", "babi_failed_tasks"}


def test_a_nan_metric_is_a_validation_that_did_not_improve(tmp_path):
    """A metric that is present but NaN (a diverged run) counts against patience; it is not a config error."""
    values = iter([50.0, float("nan"), 40.0])
    trainer = make_trainer(Transformer(tiny_config()), OPTIM,
                           run_config(max_updates=3, validate_every=1, best_metric="bleu"),
                           tmp_path, epoch_data(), valid_data=batches(1, 4, seed=9),
                           metrics=lambda m: {"bleu": next(values)})
    trainer.fit()
    assert trainer.state.best_step == 1 and trainer.state.best_score == 50.0 and trainer.state.bad_validations == 2


def test_an_unknown_best_metric_names_what_validation_gives(tmp_path):
    trainer = make_trainer(Transformer(tiny_config()), OPTIM,
                           run_config(max_updates=2, validate_every=1, best_metric="rouge"), tmp_path, epoch_data(),
                           valid_data=batches(1, 4, seed=9), metrics=lambda m: {"bleu": 1.0})
    with pytest.raises(ValueError, match="best_metric = 'rouge', but validation gives only bleu, loss, nll, ppl"):
        trainer.fit()


def test_non_finite_updates_are_skipped_then_stop(tmp_path, caplog):
    model = Transformer(tiny_config())
    data = batches(4, 2, seed=0)
    bad = copy.copy(data[1])
    trainer = make_trainer(model, OPTIM, run_config(max_updates=50, max_bad_updates=3), tmp_path,
                      lambda e: [data[0]] + [bad] * 10)
    original = trainer.accumulate  # report a NaN loss for `bad`, as an overflowing forward would

    def poisoned(group):
        stats = original(group)
        if group[0] is bad:
            stats.loss = float("nan")
        return stats
    trainer.accumulate = poisoned
    with pytest.raises(TrainingDiverged, match="3 non-finite updates in a row"):
        trainer.fit()
    assert trainer.state.step == 1  # only the good batch was applied
    assert "non-finite loss" in caplog.text
    assert ckpt.latest_checkpoint(tmp_path / "checkpoints").name == "ckpt_00000001"


def test_a_run_that_sets_no_save_interval_still_saves_every_10_minutes(tmp_path):
    """A config without save_every_*: a checkpoint only at the end, so a crash lost the whole run. The clock
    is fake: 6 minutes an update, so the saves fall after updates 2 and 4 (and the end's at 5)."""
    trainer = make_trainer(Transformer(tiny_config()), OPTIM, run_config(max_updates=5), tmp_path, epoch_data())
    trainer._elapsed = lambda: 360.0 * trainer.state.step
    trainer.fit()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [
        "ckpt_00000002", "ckpt_00000004", "ckpt_00000005"]


def test_a_diverged_run_names_the_checkpoint_to_fall_back_on(tmp_path):
    """Finite weights whose losses are not (no learning rate helps them) are saved as the newest checkpoint, so
    a resume starts there and diverges again: the error names the one before, which the message called the
    saved one "the last good weights" and left the user to find."""
    model = Transformer(tiny_config())
    data = batches(4, 2, seed=0)
    trainer = make_trainer(model, OPTIM, run_config(max_updates=50, max_bad_updates=3, save_every_updates=1), tmp_path,
                           lambda e: data)
    original = trainer.accumulate

    def poisoned(group):  # from update 3 on, every loss is NaN
        stats = original(group)
        if trainer.state.step >= 2:
            stats.loss = float("nan")
        return stats
    trainer.accumulate = poisoned
    with pytest.raises(TrainingDiverged, match="saved as .*ckpt_00000002.* remove ckpt_00000002 to resume from "
                                               "ckpt_00000001"):
        trainer.fit()


def test_diverged_weights_that_are_not_finite_are_not_saved_as_good(tmp_path):
    """An update at an absurd learning rate can make every weight NaN before the losses turn
    non-finite: no checkpoint of those weights is written, and the error says so."""
    model = Transformer(tiny_config())
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    trainer = make_trainer(model, OPTIM, run_config(max_updates=50, max_bad_updates=3), tmp_path, epoch_data())
    with pytest.raises(TrainingDiverged, match="no longer finite .* were not saved"):
        trainer.fit()
    assert ckpt.latest_checkpoint(tmp_path / "checkpoints") is None


def test_with_a_grad_scaler_the_update_after_a_skipped_one_is_applied(tmp_path):
    """fp16's path (a GradScaler; here a CPU one, as fp16 training needs CUDA): a skipped non-finite
    update must close its unscale_, or the next update fails in it."""
    model = Transformer(tiny_config())
    data = batches(4, 2, seed=0)
    trainer = make_trainer(model, OPTIM, run_config(max_updates=5), tmp_path, lambda e: data)
    trainer.scaler = torch.amp.GradScaler("cpu")
    original = trainer.accumulate

    def poisoned(group):  # the first update's loss is NaN, as an overflowing fp16 forward's would be
        stats = original(group)
        if group[0] is data[0]:
            stats.loss = float("nan")
        return stats
    trainer.accumulate = poisoned
    assert not trainer.update([data[0]]).applied and trainer.state.bad_updates == 1
    assert trainer.update([data[1]]).applied and trainer.state.step == 1 and trainer.state.bad_updates == 0


def test_fp16_on_cpu_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="fp16.*CUDA"):
        make_trainer(Transformer(tiny_config()), OPTIM, run_config(precision="fp16"), tmp_path, epoch_data())


def test_bf16_autocast_trains(tmp_path):
    model = Transformer(tiny_config())
    trainer = make_trainer(model, OPTIM, run_config(max_updates=3, precision="bf16"), tmp_path, epoch_data())
    seen = []  # the dtype of the first layer's feed-forward output at each forward
    model.encoder.layers[0].ff.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    trainer.fit()
    assert trainer.state.step == 3 and seen and set(seen) == {torch.bfloat16}  # autocast ran
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights


def test_progress_goes_to_the_callback_and_the_library_draws_no_bars(tmp_path):
    from pathlib import Path

    events = []
    trainer = make_trainer(Transformer(tiny_config()), OPTIM, run_config(max_updates=3, log_every=2), tmp_path,
                           epoch_data())
    trainer.progress = events.append
    trainer.fit()
    assert [e.step for e in events] == [0, 1, 2, 3] and events[-1].total == 3
    assert "loss" in events[2].postfix and not events[1].postfix  # log rows every 2 updates
    src = Path(__file__).resolve().parents[2] / "src" / "aiayn"
    drawing = [p.relative_to(src) for p in src.rglob("*.py") if "tqdm" in p.read_text() and p.parent.name != "commands"]
    assert drawing == []  # only aiayn/commands draws progress bars


def test_fp16_gradients_that_overflow_at_every_scale_end_the_run_as_diverged(tmp_path):
    """A finite loss with non-finite gradients, update after update: the scaler halves its scale each time;
    below MIN_LOSS_SCALE the skipped updates count, and the run stops as diverged (it had run to
    max_updates on unchanged weights, its updates counted once the scale reached 0)."""
    model = Transformer(tiny_config())
    data = batches(4, 2, seed=0)
    trainer = make_trainer(model, OPTIM, run_config(max_updates=5, max_epochs=60, max_bad_updates=3), tmp_path,
                           lambda e: data)
    trainer.scaler = torch.amp.GradScaler("cpu")
    original = trainer.accumulate

    def overflowing(group):
        stats = original(group)
        next(model.parameters()).grad.fill_(float("nan"))
        return stats
    trainer.accumulate = overflowing
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(TrainingDiverged, match="3 non-finite updates in a row at update 0"):
        trainer.fit()
    assert trainer.scaler.get_scale() < 1e-4 and trainer.state.step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_weights_made_non_finite_are_never_checkpointed(tmp_path):
    model = Transformer(tiny_config())
    data = batches(8, 2, seed=0)
    trainer = make_trainer(model, OPTIM, run_config(max_updates=50, max_bad_updates=3, save_every_updates=1),
                           tmp_path, lambda e: data)
    step = trainer.optimizer.step

    def blow_up():  # the second update leaves NaN weights behind (finite loss and gradients before it)
        step()
        if trainer.state.step == 1:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float("nan"))
    trainer.optimizer.step = blow_up
    with pytest.raises(TrainingDiverged, match="were not saved; the checkpoints .* hold earlier ones"):
        trainer.fit()
    saved = ckpt.list_checkpoints(tmp_path / "checkpoints")
    assert [p.name for p in saved] == ["ckpt_00000001"]
    assert all(bool(torch.isfinite(p).all()) for p in Transformer.from_pretrained(saved[0]).parameters())


def test_a_resume_starts_a_new_streak_and_a_new_best_metric_starts_a_new_best(tmp_path):
    data, valid = batches(6, 3, seed=0), batches(1, 4, seed=9)

    def trainer(**kw):
        return make_trainer(Transformer(tiny_config()), OPTIM, run_config(validate_every=1, **kw), tmp_path,
                            lambda e: data, valid_data=valid, metrics=lambda m: {"bleu": 25.0})

    first = trainer(max_updates=2, best_metric="bleu")
    first.fit()
    assert (first.state.best_score, first.state.best_metric) == (25.0, "bleu")
    latest = ckpt.latest_checkpoint(tmp_path / "checkpoints")
    state = ckpt.read_train_state(latest)
    second = trainer(max_updates=4, best_metric="nll", patience=3)
    second.resume(latest)
    assert second.state.best_score == float("-inf") and second.state.bad_validations == 0
    second.fit()
    assert second.state.best_metric == "nll" and second.state.best_step > state.step  # a best of its own metric
    second.state.bad_updates = 3  # as a run stopped as diverged saves its streak
    streak = second.save("ckpt_99999999")
    assert ckpt.read_train_state(streak).bad_updates == 3
    again = trainer(max_updates=6, best_metric="nll")
    again.resume(streak)
    assert again.state.bad_updates == 0 and again.state.best_metric == "nll"


def test_clip_norm_scales_the_gradient_the_optimizer_steps_with(tmp_path):
    """optim.clip_norm: the optimizer sees gradients of total norm clip_norm; the stats report the norm before."""
    pairs = reverse_pairs(4, seed=5)
    batch = [make_batch(pairs)]
    model = Transformer(tiny_config(dropout=0.0))
    reference = copy.deepcopy(model)
    sums = label_smoothed_loss(reference(batch[0].src, batch[0].tgt_in), batch[0].tgt_out, 0.1, 0)
    (sums.loss / batch[0].n_tgt_tokens).backward()
    unclipped = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in reference.parameters()])))
    trainer = make_trainer(model, OptimConfig(warmup_steps=10, clip_norm=1e-3), run_config(), tmp_path, lambda e: batch)
    seen = []
    step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        seen.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))))
        return step(*args, **kwargs)
    trainer.optimizer.step = recording_step
    stats = trainer.update(batch)
    assert unclipped > 1e-2 and stats.grad_norm == pytest.approx(unclipped, rel=1e-4)
    assert seen == [pytest.approx(1e-3, rel=1e-4)]
