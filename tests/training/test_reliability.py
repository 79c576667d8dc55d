"""Runs that never mix, resume that never corrupts, clear errors: one test per defect of the
issue "Runs that never mix, resume that never corrupts, and clear errors everywhere".
Items 7-10 (CLI errors, line splitting, --nbest, seeded sampling) are tested beside the commands."""

import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aiayn.cli import main
from aiayn.config import ConfigError
from aiayn.data.tokenizer import load_tokenizers
from aiayn.io import LockedError, exclusive_lock
from aiayn.models import load_model
from aiayn.training import checkpoint as ckpt
from aiayn.training.config import load_config
from aiayn.training.pipeline import resume_config, train

TINY = """
[model]
preset = "tiny"
[optim]
warmup_steps = 5
[data]
corpus = "{corpus}"
src_lang = "x"
tgt_lang = "y"
vocab_type = "symbols"
max_tokens = 200
test_split = "{test}"
[train]
run_dir = "{run_dir}"
max_updates = 3
save_every_updates = 3
validate_every = 3
bleu = false
progress = false
"""


def corpus(directory: Path, symbols: str, splits=("train", "val")) -> Path:
    """A {split}.{lang} corpus of copy pairs over `symbols`."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split in splits:
        lines = [" ".join(rng.choice(symbols) for _ in range(rng.randint(1, 4))) for _ in range(40)]
        for lang in ("x", "y"):
            (directory / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines))
    return directory


def config(tmp_path, corpus_dir, run_dir, test="", overrides=()):
    path = tmp_path / "recipe.toml"
    path.write_text(TINY.format(corpus=corpus_dir, run_dir=run_dir, test=test))
    return load_config(path, list(overrides))


def test_1_a_fresh_start_never_reuses_a_stale_vocabulary(tmp_path):
    run_dir = tmp_path / "run"
    x = corpus(tmp_path / "x", "abc", splits=("train",))  # no val split: the first start fails after the vocabulary
    with pytest.raises(FileNotFoundError, match=re.escape(f"{x / 'val.x'}[.gz]: file not found (split 'val'")):
        train(config(tmp_path, x, run_dir))
    assert "a" in load_tokenizers(run_dir / "tokenizer").src.pieces(range(4, 7))
    y = corpus(tmp_path / "y", "klm")
    train(config(tmp_path, y, run_dir))
    vocab = load_tokenizers(run_dir / "model").src
    assert sorted(vocab.pieces(range(4, vocab.vocab_size))) == ["k", "l", "m"]


def finished_run(tmp_path):
    run_dir = tmp_path / "run"
    train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir))
    return run_dir


def snapshot(run_dir: Path) -> dict:
    return {p.relative_to(run_dir): (p.stat().st_mtime_ns, p.read_bytes()) for p in run_dir.rglob("*")
            if p.is_file() and p.name != ".lock"}  # the lock file holds the PID of whoever ran last


@pytest.mark.parametrize("overrides", [[], ["train.max_updates=2"]])
def test_2_resuming_a_finished_run_changes_nothing(tmp_path, overrides, capsys):
    run_dir = finished_run(tmp_path)
    before = snapshot(run_dir)
    result = train(resume_config(run_dir, overrides), resume=True)
    assert result.stop_reason == "already_finished" and result.state.step == 3
    assert main(["train", "--resume", str(run_dir), *sum((["--set", o] for o in overrides), [])]) == 0
    assert "already finished" in capsys.readouterr().out
    assert snapshot(run_dir) == before


def test_3_a_resume_that_changes_the_model_shape_fails_first_and_writes_nothing(tmp_path):
    run_dir = finished_run(tmp_path)
    saved = (run_dir / "config.toml").read_bytes()
    with pytest.raises(ValueError, match="model.d_model = 64.*trained with 32"):
        train(resume_config(run_dir, ["model.d_model=64", "train.max_updates=5"]), resume=True)
    assert (run_dir / "config.toml").read_bytes() == saved
    assert train(resume_config(run_dir, ["train.max_updates=4", "model.dropout=0.2"]), resume=True).state.step == 4


def test_3_a_damaged_latest_checkpoint_falls_back_to_the_one_before(tmp_path, caplog):
    run_dir = finished_run(tmp_path)
    train(resume_config(run_dir, ["train.max_updates=6"]), resume=True)
    latest = ckpt.latest_checkpoint(run_dir / "checkpoints")
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated by a full disk, say
    with caplog.at_level(logging.WARNING):
        result = train(resume_config(run_dir, ["train.max_updates=7"]), resume=True)
    assert "cannot resume from" in caplog.text and latest.name in caplog.text
    assert result.state.step == 7  # from update 3, the checkpoint before the damaged one


def test_3_a_damaged_checkpoint_skipped_is_moved_aside_so_the_final_model_never_averages_it(tmp_path, caplog):
    """Resumed from update 3 past a damaged update 6, the run stops at 5: the final mean of the last 2 is
    of updates 3 and 5, not of 5 and the damaged 6, and the next resume starts from 5."""
    run_dir = finished_run(tmp_path)
    train(resume_config(run_dir, ["train.max_updates=6", "train.save_every_updates=1"]), resume=True)
    root = run_dir / "checkpoints"
    damaged = ckpt.latest_checkpoint(root)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 50)
    for name in ("ckpt_00000004", "ckpt_00000005"):
        shutil.rmtree(root / name)
    with caplog.at_level(logging.INFO):
        train(resume_config(run_dir, ["train.max_updates=5", "train.save_every_updates=0", "train.average_last=2"]),
              resume=True)
    assert f"moved {damaged} aside to damaged-{damaged.name}" in caplog.text
    assert [p.name for p in ckpt.list_checkpoints(root)][-2:] == ["ckpt_00000003", "ckpt_00000005"]
    assert (root / f"damaged-{damaged.name}" / "model.safetensors").read_bytes() == b"\x00" * 50  # kept, for a look
    assert "mean of 2 checkpoint(s): ckpt_00000003, ckpt_00000005" in caplog.text


def test_3_a_fresh_start_after_a_crash_before_any_checkpoint_sets_the_old_rows_aside(tmp_path, caplog):
    """No checkpoint, so no resume: a fresh start follows. The crashed run's metrics rows (cut short by the
    crash) and best checkpoint go to RUN_DIR/stale/; the new metrics.jsonl holds the new run's rows alone."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "best").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 9.0}\n{"step": 2, "spl')
    (run_dir / ".lock").write_text("12345\n")  # the crashed run's lock file, the first thing a run makes
    with caplog.at_level(logging.WARNING):
        train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir))
    assert "moved to" in caplog.text and (run_dir / "stale" / "metrics.jsonl").read_text().startswith('{"step": 1')
    assert (run_dir / "stale" / "best").is_dir()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(r["step"] <= 3 and r.get("loss") != 9.0 for r in rows)  # each line whole, and the new run's


def test_a_run_killed_before_its_first_periodic_save_resumes_from_its_best_checkpoint(tmp_path, caplog):
    """Validated at update 2, killed before any ckpt_N: best/ holds a whole checkpoint (trainer state too), but
    --resume said "no checkpoint to resume from", and a fresh start moved best/ aside: the run was lost."""
    run_dir = tmp_path / "run"
    train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir,
                 overrides=["train.max_updates=2", "train.validate_every=2", "train.save_every_updates=0"]))
    for path in ckpt.list_checkpoints(run_dir / ckpt.CHECKPOINT_DIR):  # as if killed before these were written
        shutil.rmtree(path)
    shutil.rmtree(run_dir / "model")
    with caplog.at_level(logging.WARNING):
        result = train(resume_config(run_dir, ["train.max_updates=4"]), resume=True)
    assert "resuming from the best one" in caplog.text
    assert result.state.step == 4 and (run_dir / "model").is_dir()




def test_a_crash_while_best_or_the_model_was_replaced_loses_neither(tmp_path, caplog):
    """replace_dir moves the old directory aside, then renames the new one in: a kill between the two left no
    best/ (the final model then silently became the last weights) and no model/, and the aside copies stayed."""
    run_dir = tmp_path / "run"
    train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir, overrides=['train.final="best"']))
    best = run_dir / ckpt.CHECKPOINT_DIR / ckpt.BEST
    best_step = ckpt.read_train_state(best).step
    os.replace(best, best.with_name(".old-best-12345"))  # as a kill between replace_dir's renames leaves them
    os.replace(run_dir / "model", run_dir / ".old-model-12345")
    with caplog.at_level(logging.WARNING):
        train(resume_config(run_dir, ["train.max_updates=4"]), resume=True)
    assert "restored from where a crash left it" in caplog.text and "no validation ran" not in caplog.text
    assert ckpt.read_train_state(best).step == best_step and (run_dir / "model").is_dir()
    assert not list(run_dir.rglob(".old-*"))


@pytest.mark.parametrize("resume, overrides, message", [
    (False, ['train.precision="fp16"', 'train.device="cpu"'], "needs a CUDA device"),
    (True, [], "no checkpoint to resume from"),
])
def test_a_setup_error_comes_before_the_data_is_prepared(tmp_path, resume, overrides, message):
    """Both were raised after task.prepare had built and written the vocabulary (on WMT, BPE training first)."""
    run_dir = tmp_path / "run"
    cfg = config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir, overrides=overrides)
    if resume:
        run_dir.mkdir()
        (run_dir / "config.toml").write_text((tmp_path / "recipe.toml").read_text())
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        train(cfg, resume=resume)
    assert not (run_dir / "tokenizer").exists()


def test_3_a_metrics_row_cut_short_by_a_crash_does_not_stop_the_resume(tmp_path, caplog):
    """A kill while a row was appended leaves half a line at the end of metrics.jsonl: the resume
    drops it (logged) with the rows past the checkpoint, instead of failing on every checkpoint."""
    run_dir = finished_run(tmp_path)
    metrics = run_dir / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + '{"split": "train", "step": 4, "lo')
    with caplog.at_level(logging.WARNING):
        result = train(resume_config(run_dir, ["train.max_updates=5"]), resume=True)
    assert result.state.step == 5 and "not a whole row" in caplog.text
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]  # every line whole again
    assert rows[:len(whole.splitlines())] == [json.loads(line) for line in whole.splitlines()]


def test_3_a_resume_hides_the_tensorboard_events_past_its_checkpoint(tmp_path, monkeypatch):
    """TensorBoard's events of the updates after the checkpoint (a crash's) are purged as metrics.jsonl's
    rows are: the resumed run's own follow them (SummaryWriter's purge_step; tensorboard is an extra, so a
    stand-in records how it is opened)."""
    import types

    opened = []
    writer = types.SimpleNamespace(add_scalar=lambda *a, **k: None, flush=lambda: None, close=lambda: None)
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = lambda directory, purge_step=None: opened.append(purge_step) or writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    run_dir = finished_run(tmp_path)  # 3 updates
    assert opened == [None]  # a fresh run purges nothing
    train(resume_config(run_dir, ["train.max_updates=6"]), resume=True)  # writes rows: a validation at 6
    assert opened == [None, 4]  # events from update 4 on, past the checkpoint at 3


def test_4_a_second_training_into_a_locked_run_dir_refuses_naming_the_holder(tmp_path):
    run_dir = tmp_path / "run"
    with exclusive_lock(run_dir / ".lock", "test"):
        with pytest.raises(LockedError, match=f"PID {os.getpid()}"):
            train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir))
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "config.toml").exists()
    train(config(tmp_path, tmp_path / "c", run_dir))  # the lock dies with its holder


@pytest.mark.parametrize("override,message", [
    ("train.max_updates=10.5", "train.max_updates must be an integer, got 10.5"),
    ('train.bleu="false"', "train.bleu must be true or false"),
    ("train.bleu=flase", "train.bleu must be true or false, got 'flase'"),
    ("train.seed=abc", "train.seed must be an integer, got 'abc'"),
    ('train.max_updates="ten"', "train.max_updates must be an integer"),
    ("model.d_model=1.5", "model.d_model must be an integer"),
    ("optim.betas=[0.9]", "optim.betas must be a list of 2"),
])
def test_5_config_values_are_checked_against_their_types(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_config(None, ["train.max_updates=3", override])


def test_6_an_empty_run_dir_is_an_error():
    with pytest.raises(ConfigError, match="train.run_dir must not be empty"):
        load_config(None, ["train.max_updates=3", "train.run_dir="])


def test_11_a_missing_test_split_is_reported_before_training(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'c' / 'test.x'}[.gz]: file not found (split 'test'")):
        train(config(tmp_path, corpus(tmp_path / "c", "abcd"), run_dir, test="test"))
    assert not (run_dir / "checkpoints").exists()


def test_11_an_all_empty_corpus_says_so(tmp_path):
    c = tmp_path / "empty"
    c.mkdir()
    for split in ("train", "val"):
        for lang in ("x", "y"):
            (c / f"{split}.{lang}").write_text("\n\n")
    with pytest.raises(ValueError, match="no usable pairs"):
        train(config(tmp_path, c, tmp_path / "run"))


def test_11_resuming_with_another_world_size_warns(tmp_path, caplog):
    run_dir = finished_run(tmp_path)
    last = ckpt.latest_checkpoint(run_dir / "checkpoints")
    payload = torch.load(last / ckpt.STATE_FILE, weights_only=True)
    payload["rng"] = payload["rng"] * 2  # as written by 2 ranks
    torch.save(payload, last / ckpt.STATE_FILE)
    with caplog.at_level(logging.WARNING):
        train(resume_config(run_dir, ["train.max_updates=4"]), resume=True)
    assert "written by 2 process(es) and is resumed by 1" in caplog.text


def newest_update(run_dir: Path) -> int:
    latest = ckpt.latest_checkpoint(run_dir / "checkpoints")
    return int(latest.name.removeprefix("ckpt_")) if latest else 0


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_is_bit_identical(tmp_path):
    """A tiny run killed (SIGKILL) at 10 random moments of its training and resumed each time ends with
    the weights of an uninterrupted run, bit for bit."""
    c = corpus(tmp_path / "c", "abcdefgh")
    overrides = ["train.max_updates=40", "train.save_every_updates=2", "train.validate_every=0",
                 "model.dropout=0.1"]
    run_dir, straight = tmp_path / "killed", tmp_path / "straight"
    recipe = tmp_path / "killed.toml"
    recipe.write_text(TINY.format(corpus=c, run_dir=run_dir, test=""))
    rng = random.Random(1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count everywhere: bit-identical sums
    start = [sys.executable, "-m", "aiayn", "train", str(recipe), *sum((["--set", o] for o in overrides), [])]
    assert subprocess.run([*start, "--run-dir", str(straight)], env=env, capture_output=True).returncode == 0
    resume = [sys.executable, "-m", "aiayn", "train", "--resume", str(run_dir)]
    left = []  # the update of the newest checkpoint after each kill
    for i in range(10):
        before = newest_update(run_dir)
        proc = subprocess.Popen(resume if before else start, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 120  # a hang guard
        target = before + rng.choice([2, 4])  # one or two saves on: a timer alone killed only starts, or ran to the end
        while proc.poll() is None and newest_update(run_dir) < target and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.03))  # then at a random moment: in an update or a save
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left.append(newest_update(run_dir))
    assert sum(0 < update < 40 for update in left) >= 5, f"kills mid-training: {left}"  # resumed from the middle
    cmd = resume if ckpt.latest_checkpoint(run_dir / "checkpoints") else start
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    a, b = load_model(straight / "model"), load_model(run_dir / "model")
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


def test_11_only_rank_0_prints_the_summary(tmp_path, monkeypatch, capsys):
    """Under torchrun every rank runs the command; ranks other than 0 train and print nothing."""
    from aiayn.commands import train as train_command
    from aiayn.training import pipeline
    from aiayn.training.checkpoint import TrainState
    from aiayn.training.trainer import FitResult

    recipe = tmp_path / "r.toml"
    recipe.write_text(TINY.format(corpus=corpus(tmp_path / "c", "ab"), run_dir=tmp_path / "run", test=""))
    monkeypatch.setattr(pipeline, "train", lambda cfg, resume=False, progress=None: FitResult(TrainState(step=3), "max_updates"))
    monkeypatch.setattr(train_command, "_is_main", lambda: False)
    assert main(["train", str(recipe)]) == 0
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(train_command, "_is_main", lambda: True)
    monkeypatch.setattr(pipeline, "evaluate_test", lambda cfg, progress=None: None)
    assert main(["train", str(recipe)]) == 0
    assert "stopped (max_updates) after 3 updates" in capsys.readouterr().out


def test_7_average_names_a_damaged_checkpoint(tmp_path, capsys):
    run_dir = finished_run(tmp_path)
    last = ckpt.latest_checkpoint(run_dir / "checkpoints")
    (last / "model.safetensors").write_bytes(b"\x00" * 50)
    assert main(["average", str(last), str(run_dir / "model"), "-o", str(tmp_path / "avg")]) == 2
    err = capsys.readouterr().err
    assert f"{last / 'model.safetensors'}: cannot load weights" in err and "Traceback" not in err


@pytest.mark.parametrize("crash", ["missing", "older"])
def test_3_a_crash_between_the_last_checkpoint_and_the_model_directory_is_mended_on_resume(tmp_path, caplog, crash):
    """The budget spent, the resume did nothing, and RUN_DIR/model stayed missing (or an older run's)."""
    run_dir = finished_run(tmp_path)
    if crash == "missing":
        shutil.rmtree(run_dir / "model")
    else:
        os.utime(run_dir / "model", ns=(1, 1))  # written before the last checkpoint
    with caplog.at_level(logging.WARNING):
        result = train(resume_config(run_dir), resume=True)
    assert result.stop_reason == "already_finished" and "written now" in caplog.text
    assert load_model(run_dir / "model").config == load_model(ckpt.latest_checkpoint(run_dir / "checkpoints")).config
    before = snapshot(run_dir)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(resume_config(run_dir), resume=True)
    assert snapshot(run_dir) == before and "written now" not in caplog.text  # a finished run is left as it is
