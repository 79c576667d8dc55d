"""`aiayn import hf NAME`: a Hub name is read from the user's Hugging Face cache (`HF_HUB_OFFLINE=1`: the
cache alone), laid out here as `huggingface_hub` lays it out; nothing is downloaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from aiayn.io import read_tensors

REVISION = "0123456789abcdef0123456789abcdef01234567"


def cache_of(hf_dir: Path, root: Path, name: str) -> Path:
    """A hub cache under `root` holding `hf_dir` as the main revision of model `name`, and a pickle that
    an import must never fetch or read."""
    repo = root / f"models--{name.replace('/', '--')}"
    snapshot = shutil.copytree(hf_dir, repo / "snapshots" / REVISION)
    (snapshot / "pytorch_model.bin").write_bytes(b"not to be read")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return root


def aiayn(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "home")}
    return subprocess.run([sys.executable, "-m", "aiayn", "import", "hf", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_hub_name_imports_from_the_cache_offline_and_an_uncached_one_says_so(bert_dirs, tmp_path):
    cache = cache_of(bert_dirs[0], tmp_path / "hub", "someone/tiny-bert")
    done = aiayn("someone/tiny-bert", str(tmp_path / "ours"), cache=cache)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "ours" / "task.json").read_text())["task"] == "classify"
    ours, direct = (read_tensors(d / "model.safetensors") for d in (tmp_path / "ours", bert_dirs[1]))
    imported = [k for k in ours if not k.startswith("mlm_")]  # a classifier's unused MLM head keeps its random start
    assert ours.keys() == direct.keys() and all(torch.equal(ours[k], direct[k]) for k in imported)

    missing = aiayn("someone/not-cached", str(tmp_path / "other"), cache=cache)
    assert missing.returncode == 2
    assert "someone/not-cached: not in the Hugging Face cache, and the Hub cannot be reached" in missing.stderr
    not_a_name = aiayn("no/such/dir", str(tmp_path / "other"), cache=cache)
    assert "no/such/dir: no such directory, nor a Hugging Face Hub name" in not_a_name.stderr
    assert not (tmp_path / "other").exists()
