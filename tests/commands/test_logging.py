"""Log levels of the `aiayn` command: INFO by default, DEBUG with -v, and under torchrun only rank 0
logs INFO (the other ranks would repeat its lines)."""

import logging
import os
import subprocess
import sys

import pytest

from aiayn.cli import log_level


@pytest.mark.parametrize("verbose, rank, level", [
    (False, "0", logging.INFO), (False, "1", logging.WARNING), (False, "3", logging.WARNING),
    (True, "0", logging.DEBUG), (True, "1", logging.DEBUG),
])
def test_log_level(verbose, rank, level):
    assert log_level(verbose, rank) == level


RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "demo.toml")


def _train_stderr(tmp_path, rank):
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    if rank is not None:
        env["RANK"] = rank
    run_dir = tmp_path / f"run-{rank}"
    done = subprocess.run([sys.executable, "-m", "aiayn", "train", RECIPE, "--run-dir", str(run_dir),
                           "--set", "train.max_updates=1", "--set", "data.n_train=64", "--set", "data.n_valid=8",
                           "--set", "train.progress=false"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_rank_1_logs_no_info(tmp_path):
    """A one-update training run (it logs the model's size, the data and the checkpoints at INFO):
    rank 1, which torchrun marks with RANK=1, logs none of it."""
    assert "INFO aiayn." in _train_stderr(tmp_path, None)
    assert "INFO " not in _train_stderr(tmp_path, "1")
