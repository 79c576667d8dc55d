"""Shared fixtures for tests/data: the read-only corpora in ../shared/data (skip when absent)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from shared_data import SHARED_DATA

MULTI30K = SHARED_DATA / "multi30k"


def read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


@pytest.fixture(scope="session")
def gz_lines():
    """The lines of a .gz text file, newline removed (an independent reader for reference)."""
    return read_gz_lines


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    if not (MULTI30K / "val.en.gz").is_file():
        pytest.skip(f"Multi30k not found under {MULTI30K}")
    return MULTI30K


@pytest.fixture(scope="session")
def multi30k_bpe(multi30k_dir):
    """Joint BPE (1000 pieces) trained on Multi30k train en+de: the paper's shared vocabulary, small."""
    from aiayn.data.tokenizer import SentencePieceTokenizer

    texts = [s.strip() for lang in ("en", "de") for s in read_gz_lines(multi30k_dir / f"train.{lang}.gz")]
    return SentencePieceTokenizer.train(texts, vocab_size=1000, model_type="bpe")
