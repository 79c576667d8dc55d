import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from aiayn.models.transformer import Transformer
from aiayn.training import checkpoint as ckpt

from training_helpers import tiny_config


def _setup(seed=0):
    torch.manual_seed(seed)
    model = Transformer(tiny_config())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]])).sum().backward()
    opt.step()
    return model, opt


def test_a_checkpoint_from_before_best_score_migrates(tmp_path):
    # states written before best_metric existed kept best_nll (lower wins); best_score is its negation
    model, opt = _setup()
    state = ckpt.TrainState(step=3, best_score=-1.25, best_step=2)
    path = ckpt.save_checkpoint(tmp_path, ckpt.checkpoint_name(3), model, opt, state, [ckpt.capture_rng()])
    state_file = path / ckpt.STATE_FILE
    old = torch.load(state_file, weights_only=True)
    old["state"]["best_nll"] = 1.25
    del old["state"]["best_score"]
    torch.save(old, state_file)
    assert ckpt.load_checkpoint(path, *_setup(seed=1)).best_score == -1.25
    assert ckpt.read_train_state(path).best_score == -1.25


def test_round_trip_restores_weights_optimizer_rng_and_progress(tmp_path):
    model, opt = _setup()
    state = ckpt.TrainState(step=7, epoch=2, batch_index=3, elapsed=12.5, best_score=-1.25, best_step=6)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = ckpt.save_checkpoint(tmp_path, ckpt.checkpoint_name(7), model, opt, state, [ckpt.capture_rng()])
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)

    rng = (random.getstate(), torch.get_rng_state())
    assert ckpt.read_train_state(path) == state  # a look: the RNGs are left alone
    assert random.getstate() == rng[0] and torch.equal(torch.get_rng_state(), rng[1])

    other, other_opt = _setup(seed=1)
    loaded = ckpt.load_checkpoint(path, other, other_opt)
    assert loaded == state
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
    for p, q in zip(model.parameters(), other.parameters()):
        assert torch.equal(p, q)
    a, b = opt.state_dict(), other_opt.state_dict()
    for i in a["state"]:
        assert torch.equal(a["state"][i]["exp_avg_sq"], b["state"][i]["exp_avg_sq"])
    # the state file is plain data: loadable without unpickling arbitrary objects
    torch.load(path / ckpt.STATE_FILE, weights_only=True)


def test_a_resumed_optimizer_keeps_its_own_settings_and_takes_the_checkpoints_moments(tmp_path):
    """A run saved with coupled Adam and no decay, resumed with `--set optim.weight_decay=0.1`: the
    resumed optimizer decays (decoupled) as the config says, from the saved moments and step count."""
    from aiayn.config import OptimConfig
    from aiayn.training.schedule import adam

    model, opt = _setup()
    path = ckpt.save_checkpoint(tmp_path, ckpt.checkpoint_name(1), model, opt, ckpt.TrainState(step=1),
                                [ckpt.capture_rng()])
    other = _setup(seed=1)[0]
    resumed = adam(other.parameters(), OptimConfig(betas=(0.8, 0.9), weight_decay=0.1), lr=1e-3)
    ckpt.load_checkpoint(path, other, resumed)
    (group,) = resumed.param_groups
    assert (group["betas"], group["weight_decay"], group["decoupled_weight_decay"]) == ((0.8, 0.9), 0.1, True)
    saved, loaded = opt.state_dict()["state"], resumed.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for i in saved:
        assert torch.equal(saved[i]["exp_avg"], loaded[i]["exp_avg"]) and float(loaded[i]["step"]) == 1.0


def test_list_and_prune(tmp_path):
    model, opt = _setup()
    for step in (1, 2, 3, 10):
        ckpt.save_checkpoint(tmp_path, ckpt.checkpoint_name(step), model, opt, ckpt.TrainState(step=step),
                             [ckpt.capture_rng()])
    ckpt.save_checkpoint(tmp_path, ckpt.BEST, model, opt, ckpt.TrainState(step=2), [ckpt.capture_rng()])
    (tmp_path / ".tmp-ckpt_00000011-999").mkdir()  # left by a killed writer
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [ckpt.checkpoint_name(s) for s in (1, 2, 3, 10)]
    ckpt.prune_checkpoints(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "ckpt_00000003", "ckpt_00000010"]


def test_found_beside_looks_in_the_checkpoint_then_its_run_in_order(tmp_path):
    run = tmp_path / "run"
    c = run / ckpt.CHECKPOINT_DIR / ckpt.checkpoint_name(7)
    for d in (c, run / "a", run / "b"):
        d.mkdir(parents=True)
    assert ckpt.run_dir_of(c) == run.resolve()
    assert ckpt.found_beside(c, "x.json", ["a", "b"]) is None
    (run / "b" / "x.json").write_text("{}")
    assert ckpt.found_beside(c, "x.json", ["a", "b"]) == run.resolve() / "b"
    (run / "a" / "x.json").write_text("{}")
    assert ckpt.found_beside(c, "x.json", ["a", "b"]) == run.resolve() / "a"
    (c / "x.json").write_text("{}")
    assert ckpt.found_beside(c, "x.json", ["a", "b"]) == c


def test_load_errors_name_the_file(tmp_path):
    model, opt = _setup()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):  # named before the large state is read
        ckpt.load_checkpoint(tmp_path, model, opt)
    path = ckpt.save_checkpoint(tmp_path, "ckpt_00000001", model, opt, ckpt.TrainState(), [ckpt.capture_rng()])
    (path / ckpt.STATE_FILE).rename(tmp_path / "moved")
    with pytest.raises(FileNotFoundError, match="trainer_state.pt"):
        ckpt.load_checkpoint(path, model, opt)
    (path / ckpt.STATE_FILE).write_bytes(b"garbage")
    with pytest.raises(ValueError, match="trainer_state.pt: cannot read"):
        ckpt.load_checkpoint(path, model, opt)
    with pytest.raises(ValueError, match="trainer_state.pt: cannot read"):
        ckpt.read_train_state(path)
    with pytest.raises(FileNotFoundError, match="trainer_state.pt"):
        ckpt.read_train_state(tmp_path)
    for payload in ({"format": 1}, [1, 2], {"state": 3, "optimizer": {}, "rng": []}):  # a torch file, not ours
        torch.save(payload, path / ckpt.STATE_FILE)
        with pytest.raises(ValueError, match="trainer_state.pt: not a trainer state"):
            ckpt.load_checkpoint(path, model, opt)


WRITER = textwrap.dedent("""
    import os, sys, torch
    sys.path.insert(0, {helpers!r})
    from training_helpers import tiny_config
    from aiayn.models.transformer import Transformer
    from aiayn.training import checkpoint as ckpt
    torch.manual_seed(int(sys.argv[2]))
    model = Transformer(tiny_config())
    opt = torch.optim.Adam(model.parameters())
    ckpt.save_checkpoint(sys.argv[1], ckpt.checkpoint_name(int(sys.argv[2])), model, opt,
                         ckpt.TrainState(step=int(sys.argv[2])), [ckpt.capture_rng()])
    print("done", flush=True)
""")


def test_kill_9_during_a_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(helpers=os.path.dirname(__file__)))
    root = tmp_path / "ckpts"
    subprocess.run([sys.executable, str(script), str(root), "1"], check=True, capture_output=True)
    env = {**os.environ, ckpt.SLEEP_ENV: "60"}  # sleeps inside the write, after the weights are on disk
    proc = subprocess.Popen([sys.executable, str(script), str(root), "2"], env=env, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".tmp-") and (p / ckpt.STATE_FILE).exists() for p in root.iterdir()):
        assert time.monotonic() < deadline and proc.poll() is None, "writer never reached the write"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["ckpt_00000001"]
    model, opt = _setup(seed=5)
    assert ckpt.load_checkpoint(root / "ckpt_00000001", model, opt).step == 1
    torch.manual_seed(1)
    reference = Transformer(tiny_config())
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q)
    ckpt.prune_checkpoints(root, keep_last=5)  # the next run cleans the dead writer's temp dir
    assert sorted(p.name for p in root.iterdir()) == ["ckpt_00000001"]
