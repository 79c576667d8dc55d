"""Patches as tokens (ViT) on scikit-learn's digits: the patch cut, the fixed split, a learning check."""

import numpy as np
import pytest

from aiayn.tasks.vision import SPLIT, patches


def test_patches_are_row_major_squares():
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    out = patches(image, 2)
    assert out.shape == (1, 4, 4)
    assert out[0, 0].tolist() == [0, 1, 4, 5] and out[0, 1].tolist() == [2, 3, 6, 7]
    assert out[0, 3].tolist() == [10, 11, 14, 15]
    with pytest.raises(ValueError, match="does not divide"):
        patches(image, 3)


def test_vit_learns_the_digits(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="the digits need the vision extra: pip install -e '.[vision]'")
    import json

    from aiayn.cli import main

    recipe = tmp_path / "r.toml"
    recipe.write_text("[train]\nmax_updates = 300\nvalidate_every = 300\n")
    args = ["train", str(recipe), "--set", 'task="image-classify"', "--set", 'model.type="encoder-only"',
            "--set", "model.d_model=32", "--set", "model.n_heads=2", "--set", "model.n_layers=2", "--set", "model.d_ff=64",
            "--set", "model.norm_first=true", "--set", "model.max_positions=17", "--set", 'data.corpus="sklearn:digits"',
            "--set", 'data.valid_split="valid"', "--set", 'data.test_split="test"', "--set", "data.max_tokens=1088",
            "--set", "optim.warmup_steps=50", "--set", "train.progress=false", "--run-dir", str(tmp_path / "run")]
    assert main(args) == 0
    scores = json.loads((tmp_path / "run" / "test_scores.json").read_text())
    assert scores["n_examples"] == 1797 - int(SPLIT["test"][0] * 1797)
    assert scores["accuracy"] > 85.0  # chance is 10%
