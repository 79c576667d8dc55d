"""End to end through `aiayn train` / `aiayn average` on a tiny synthetic task."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from aiayn.cli import main
from aiayn.models.transformer import Transformer
from aiayn.training import checkpoint as ckpt
from aiayn.plots.curves import read_metrics
from aiayn.decoding.translator import Translator

TINY = """
[model]
preset = "tiny"
dropout = 0.1
[optim]
warmup_steps = 20
lr_factor = 2.0
[data]
corpus = "synthetic"
vocab_type = "symbols"
n_train = 300
n_valid = 8
max_len = 6
max_tokens = 300
[train]
max_updates = 6
validate_every = 3
save_every_updates = 3
log_every = 1
progress = false
"""


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_train_writes_a_self_contained_run(tmp_path, recipe, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", str(recipe), "--run-dir", str(run_dir)]) == 0
    assert "stopped (max_updates) after 6 updates" in capsys.readouterr().out
    optional = {"tensorboard"}  # written where the tensorboard extra is installed
    assert sorted(p.name for p in run_dir.iterdir() if p.name not in optional) == [
        ".lock", "checkpoints", "config.toml", "metrics.jsonl", "model", "tokenizer"]
    translator = Translator.from_pretrained(run_dir / "model")  # config + weights + tokenizer
    assert isinstance(translator.translate(["a b c"], method="greedy")[0], str)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows if r["split"] == "valid"] == [3, 6]
    assert all("bleu" in r for r in rows if r["split"] == "valid")
    assert [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")] == ["ckpt_00000003", "ckpt_00000006"]
    # a second run into the same directory must not silently overwrite it
    assert main(["train", str(recipe), "--run-dir", str(run_dir)]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err


def test_a_fresh_run_never_replaces_what_a_directory_no_run_held_has_of_its_names(tmp_path, recipe, capsys):
    """--run-dir . in a project folder: its recipe named config.toml and its model/ are the user's, kept;
    a directory an earlier run held (its .lock) is the run's to write again, and other files are let be."""
    project = tmp_path / "project"
    (project / "model").mkdir(parents=True)
    (project / "model" / "notes.txt").write_text("mine")
    (project / "config.toml").write_text(recipe.read_text() + "# my notes\n")
    assert main(["train", str(project / "config.toml"), "--run-dir", str(project)]) == 2
    assert "not a run directory, and it holds config.toml, model, which a run writes" in capsys.readouterr().err
    assert (project / "config.toml").read_text().endswith("# my notes\n")
    assert sorted(p.name for p in project.rglob("*")) == ["config.toml", "model", "notes.txt"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "tiny.toml").write_text(recipe.read_text())
    assert main(["train", str(other / "tiny.toml"), "--run-dir", str(other), "--set", "train.validate_every=0"]) == 0
    assert (other / "tiny.toml").read_text() == recipe.read_text()


def test_cli_resume_equals_straight_run(tmp_path, recipe):
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "a"), "--set", "train.validate_every=0"]) == 0
    assert main(["train", str(recipe), "--run-dir", str(tmp_path / "b"), "--set", "train.validate_every=0",
                 "--set", "train.max_updates=4"]) == 0
    assert main(["train", "--resume", str(tmp_path / "b"), "--set", "train.max_updates=6"]) == 0
    a = Transformer.from_pretrained(tmp_path / "a" / "model")
    b = Transformer.from_pretrained(tmp_path / "b" / "model")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=name)


def test_average_command(tmp_path, recipe, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", str(recipe), "--run-dir", str(run_dir), "--set", "train.validate_every=0"]) == 0
    out = tmp_path / "avg"
    assert main(["average", str(run_dir / "checkpoints"), "--last", "2", "-o", str(out)]) == 0
    models = [Transformer.from_pretrained(p) for p in ckpt.list_checkpoints(run_dir / "checkpoints")]
    avg = Translator.from_pretrained(out).model
    for p, p1, p2 in zip(avg.parameters(), *[m.parameters() for m in models]):
        torch.testing.assert_close(p, (p1 + p2) / 2)
    assert main(["average", str(tmp_path / "nowhere"), "-o", str(out)]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_bad_config_on_the_command_line(tmp_path, recipe, capsys):
    assert main(["train", str(recipe), "--set", "train.max_update=3"]) == 2
    err = capsys.readouterr().err
    assert "tiny.toml" in err and "train.max_update" in err and "Traceback" not in err


def test_sigterm_saves_and_exits_cleanly(tmp_path, recipe):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "aiayn", "train", str(recipe), "--run-dir", str(run_dir),
           "--set", "train.max_updates=100000", "--set", "train.validate_every=0", "--set", "train.save_every_updates=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").read_text().count("\n") >= 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "received SIGTERM" in err and "stopped (signal)" in out
    last = ckpt.latest_checkpoint(run_dir / "checkpoints")
    state = torch.load(last / ckpt.STATE_FILE, weights_only=True)["state"]
    assert state["step"] >= 2 and last.name == ckpt.checkpoint_name(state["step"])
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert json.loads(json.dumps(rows[-1]))["step"] <= state["step"]


def test_random_batches_cover_each_example_once_within_budget():
    """data.batching = "random": the token-bucket sampler's packer on an unsorted order, with
    its DDP policy (every example in exactly one batch of one rank; equal batch counts)."""
    from aiayn.data.preprocess import ParallelDataset
    from aiayn.data.synthetic import symbols, synthetic_pairs
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair

    pairs = synthetic_pairs("reverse", 500, seed=0, max_len=9)
    ds = ParallelDataset.from_corpus(pairs, TokenizerPair.shared(SymbolTokenizer(symbols(10))))
    sampler = lambda **kw: ds.sampler(200, seed=1, sort_by_length=False, **kw)  # noqa: E731
    one = sampler().batches(0)
    assert sorted(i for b in one for i in b) == list(range(500))
    for b in one:
        batch = ds.collate(b)
        assert batch.src.numel() + batch.tgt_in.numel() <= 200
    lengths = [len(ds[i][0]) for i in one[0]]
    assert lengths != sorted(lengths) and lengths != sorted(lengths, reverse=True)  # mixed lengths
    assert sampler().batches(1) != one  # reshuffled each epoch
    shards = [sampler(rank=r, world_size=2).batches(0) for r in range(2)]
    assert len(shards[0]) == len(shards[1])
    assert sorted(i for s in shards for b in s for i in b) == list(range(500))


def test_average_keeps_the_runs_task(tmp_path, capsys):
    """Checkpoints are model directories of their own (the task's tokenizer and task.json beside the
    weights), so an averaged model of a summarization run answers as one; an older run with no task.json
    anywhere is refused instead of read as translation."""
    from aiayn.tasks import load_pipeline, read_task_info

    rows = [{"body": f"w{i % 7} w{i % 5} w{i % 3} hello", "subject": f"w{i % 7}"} for i in range(60)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets = ['task="summarization"', 'data.format="jsonl"', f'data.corpus="{tmp_path}"', 'data.source_field="body"',
            'data.target_field="subject"', 'data.valid_split="train"', 'data.test_split=""',
            'data.vocab_type="symbols"', "data.max_input_tokens=3", 'model.preset="tiny"', "decode.max_len_b=7",
            "train.max_updates=4", "train.save_every_updates=2", "train.validate_every=0", "train.progress=false"]
    recipe = tmp_path / "r.toml"
    recipe.write_text("")
    run_dir = tmp_path / "run"
    assert main(["train", str(recipe), "--run-dir", str(run_dir), *[x for s in sets for x in ("--set", s)]]) == 0
    checkpoints = ckpt.list_checkpoints(run_dir / "checkpoints")
    assert [read_task_info(c) for c in checkpoints] == [read_task_info(run_dir / "model")] * 2
    assert all((c / "tokenizer.json").read_bytes() == (run_dir / "model" / "tokenizer.json").read_bytes()
               for c in checkpoints)
    assert len(load_pipeline(checkpoints[-1]).run(["w1 w2 w3 hello"])) == 1  # a checkpoint opens through the door
    out = tmp_path / "avg"
    assert main(["average", str(run_dir / "checkpoints"), "--last", "2", "-o", str(out)]) == 0
    assert read_task_info(out) == read_task_info(run_dir / "model")
    assert read_task_info(out)["task"] == "summarization" and read_task_info(out)["max_input_tokens"] == 3
    assert len(load_pipeline(out).run(["w1 w2 w3 hello"])) == 1  # the summarization door opens it

    for d in (*checkpoints, run_dir / "model"):  # a run from before checkpoints carried task.json
        (d / "task.json").unlink()
    capsys.readouterr()
    assert main(["average", str(run_dir / "checkpoints"), "--last", "2", "-o", str(tmp_path / "avg2")]) == 2
    err = capsys.readouterr().err
    assert "task.json" in err and "summarization run" in err and "--task-from" in err
    assert main(["average", str(run_dir / "checkpoints"), "--last", "2", "-o", str(tmp_path / "avg2"),
                 "--task-from", str(out)]) == 0
    assert read_task_info(tmp_path / "avg2") == read_task_info(out)


def test_resume_may_change_the_training_only_model_fields_and_nothing_else(tmp_path):
    """Those `averaging` may differ in too (dropout, ACT's ponder cost); a shape field is refused, named."""
    from aiayn.config import training_only_names
    from aiayn.training.config import load_config, save_config
    from aiayn.training.pipeline import check_resumable

    act = ['model.recurrence="universal"', 'model.halting="act"', "model.depth_steps=2", "train.max_updates=1"]
    save_config(load_config(None, act), tmp_path)
    assert {"dropout", "ponder_cost"} <= training_only_names(load_config(None, act).model.build(64, 64))
    for changed in ("model.dropout=0.3", "model.attention_dropout=0.2", "model.ponder_cost=0.05"):
        check_resumable(tmp_path, load_config(None, [*act, changed]))
    with pytest.raises(ValueError, match="with model.depth_steps = 3: the run was trained with 2"):
        check_resumable(tmp_path, load_config(None, [*act, "model.depth_steps=3"]))
