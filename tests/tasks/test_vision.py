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


@pytest.mark.slow  # a learning check of more than a few seconds
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


@pytest.mark.parametrize("image", [[[]], [], [[0.5, 2.0]], [["a"]], [[0.1, 0.2], [0.3]], [[float("nan")]]])
def test_an_image_that_is_no_grid_of_pixels_is_a_request_error(image):
    """Refused with the shape the route wants (a 422 over HTTP), not numpy's error (a 500)."""
    from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
    from aiayn.tasks.pipeline import RequestError
    from aiayn.tasks.vision import ImageClassifier

    model = EncoderOnly(EncoderOnlyConfig(vocab_size=1, d_model=8, n_heads=2, n_layers=1, d_ff=16, n_classes=2,
                                          input="patches", patch_dim=4, max_positions=5))
    classifier = ImageClassifier(model, ["0", "1"], 2)
    assert classifier([[[0.0, 0.5], [1.0, 0.25]]])[0][0] in ("0", "1")
    with pytest.raises(RequestError, match="an image is a list of pixel rows"):
        classifier.prepare([image])
