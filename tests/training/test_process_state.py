"""The library's `train` leaves process-wide settings as it found them: the thread count, the
attention backend flag it switches, and every global random state it seeds, also when it fails."""

import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from aiayn.training.config import load_config
from aiayn.training.pipeline import train

TINY = """
[model]
preset = "tiny"
[optim]
warmup_steps = 5
[data]
corpus = "synthetic"
vocab_type = "symbols"
n_train = 60
n_valid = 4
max_len = 5
max_tokens = 200
[train]
max_updates = 2
validate_every = 0
save_every_updates = 2
bleu = false
progress = false
"""


def process_state() -> dict:
    """Everything `train` may change process-wide, in a form that compares with ==."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "threads": torch.get_num_threads(),
        "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(),
        "python": (version, internal, gauss),
        "numpy": (name, keys.tolist(), pos, has_gauss, cached),
        "torch": torch.get_rng_state().tolist(),
        "cuda_initialised": torch.cuda.is_initialized(),
    }
    if torch.cuda.is_initialized():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    else:  # the seed `torch.manual_seed` queues for CUDA's first use (torch's private tracker)
        state["cuda_queued"] = [id(call) for call in torch.cuda._lazy_seed_tracker.get_calls()]
    return state


def recipe(tmp_path, device: torch.device, *overrides: str) -> list[str]:
    """The recipe file and its overrides, as `load_config` (and `aiayn train`) take them."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    threads = 1 if torch.get_num_threads() > 1 else 2  # not the caller's count: the run changes it
    return [str(path), f"train.run_dir={tmp_path / 'run'}", f"train.device={device.type}",
            f"train.num_threads={threads}", *overrides]


def config(tmp_path, device: torch.device, *overrides: str):
    path, *rest = recipe(tmp_path, device, *overrides)
    return load_config(path, rest)


def seeded_by_the_caller():
    """Global random states that are the caller's own, not the run's seed, and not fresh."""
    random.seed(123)
    np.random.seed(456)
    torch.manual_seed(789)
    random.random(), np.random.rand(3), torch.rand(3)


def test_a_run_leaves_threads_flags_and_random_states_as_it_found_them(tmp_path, device):
    """On CUDA the run switches cuDNN attention off (`runtime.no_cudnn_attention`); CUDA is initialised first
    here, so that its generators have a state to compare (the next test starts without)."""
    cfg = config(tmp_path, device)
    if device.type == "cuda":
        torch.cuda.init()
    seeded_by_the_caller()
    before = process_state()
    result = train(cfg)
    assert result.state.step == 2
    assert process_state() == before


def test_a_failed_run_leaves_them_too(tmp_path, device):
    """It fails after seeding and building the model: init_from names no model directory."""
    cfg = config(tmp_path, device, f"train.init_from={tmp_path / 'missing'}")
    seeded_by_the_caller()
    before = process_state()
    with pytest.raises(FileNotFoundError, match="model directory"):
        train(cfg)
    assert process_state() == before


FIRST_CUDA_USE = """
import sys, torch
from aiayn.training.config import load_config
from aiayn.training.pipeline import train

torch.manual_seed(789)  # the caller's seed, queued for CUDA's first use
assert not torch.cuda.is_initialized()
train(load_config(sys.argv[1], sys.argv[2:]))
assert torch.cuda.is_initialized()  # by the run, which seeded it with its own seed
expected = torch.Generator("cuda").manual_seed(789).get_state()  # what a first use after the caller's seed gives
assert torch.equal(torch.cuda.get_rng_state(), expected)
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_run_that_initialises_cuda_leaves_its_generators_as_the_first_use_would(tmp_path):
    """In a fresh process (CUDA not yet initialised): the caller's queued seed is what CUDA's
    generators hold after the run, not the run's seed and draws."""
    done = subprocess.run([sys.executable, "-c", FIRST_CUDA_USE, *recipe(tmp_path, torch.device("cuda"))],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
