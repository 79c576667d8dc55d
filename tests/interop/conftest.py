"""Checkpoints built once per test session (per xdist worker): tiny random-weight models saved by
`transformers`, and their aiayn imports."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import hf_checkpoints  # noqa: E402  (tests/interop is on the pytest pythonpath)
from shared_data import SHARED_DATA  # noqa: E402

from aiayn.interop import import_hf  # noqa: E402


def _built(tmp_path_factory, name: str, build):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp(name)
    hf = build(root / "hf")
    return hf, import_hf(hf, root / "aiayn")


@pytest.fixture(scope="session")
def marian_dirs(tmp_path_factory):
    """(Hugging Face directory, aiayn import) of a tiny random Marian de->en."""
    return _built(tmp_path_factory, "marian", hf_checkpoints.marian)


@pytest.fixture(scope="session")
def gpt2_dirs(tmp_path_factory):
    return _built(tmp_path_factory, "gpt2", hf_checkpoints.gpt2)


@pytest.fixture(scope="session")
def bert_dirs(tmp_path_factory):
    return _built(tmp_path_factory, "bert", hf_checkpoints.bert)


@pytest.fixture(scope="session")
def bert_mlm_dirs(tmp_path_factory):
    return _built(tmp_path_factory, "bert-mlm", lambda d: hf_checkpoints.bert(d, mlm=True))


@pytest.fixture(scope="session")
def vit_dirs(tmp_path_factory):
    return _built(tmp_path_factory, "vit", hf_checkpoints.vit)
