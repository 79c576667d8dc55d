"""ViT <-> aiayn's encoder-only model on patches: logits, the round trip, the image-classify door."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_checkpoints import assert_logits_close, assert_same_tensors
from aiayn.interop import export_hf
from aiayn.models import load_model
from aiayn.tasks.vision import patches


def _images(n: int = 3) -> np.ndarray:
    return np.random.default_rng(0).random((n, 8, 8), dtype=np.float32)  # (B, H, W) in [0, 1]


def _compare(hf_dir, ours) -> None:
    from transformers import ViTForImageClassification

    hf = ViTForImageClassification.from_pretrained(hf_dir).eval()
    images = _images()
    with torch.no_grad():
        theirs = hf(pixel_values=torch.from_numpy(images)[:, None]).logits  # (B, C=1, H, W)
        mine = load_model(ours).classify(torch.from_numpy(patches(images, 2)))
    assert_logits_close(mine, theirs)


def test_import_gives_vits_logits(vit_dirs):
    _compare(*vit_dirs)


def test_export_gives_aiayns_logits_and_round_trip_tensors(vit_dirs, tmp_path):
    hf_dir, ours = vit_dirs
    out = export_hf(ours, tmp_path / "back")
    assert_same_tensors(hf_dir, out)
    _compare(out, ours)


def test_image_classify_door(vit_dirs):
    pytest.importorskip("sklearn")
    import aiayn

    _, ours = vit_dirs
    pipe = aiayn.load_pipeline(ours)
    images = _images(2)
    with torch.no_grad():
        probs = load_model(ours).classify(torch.from_numpy(patches(images, 2))).softmax(-1)
    out = pipe([image.tolist() for image in images])
    assert [label for label, _ in out] == [str(int(i)) for i in probs.argmax(-1)]
    assert pipe.attention(0).describe()  # [CLS]'s attention over test digit 0


def test_the_exported_processor_turns_8_bit_pixels_into_what_the_model_read(vit_dirs, tmp_path):
    """A PIL image's 0..255 pixels through the exported preprocessor_config.json give the [0, 1] values
    the image-classify door feeds (it fed 0..255 before: no rescale)."""
    Image = pytest.importorskip("PIL.Image")
    from transformers import AutoImageProcessor, ViTForImageClassification

    _, ours = vit_dirs
    out = export_hf(ours, tmp_path / "back")
    pixels = (_images(1)[0] * 255).round().astype(np.uint8)  # (8, 8)
    values = AutoImageProcessor.from_pretrained(out)(Image.fromarray(pixels, mode="L"), return_tensors="pt").pixel_values
    np.testing.assert_allclose(values[0, 0].numpy(), pixels / 255, atol=1e-6)
    with torch.no_grad():
        theirs = ViTForImageClassification.from_pretrained(out).eval()(pixel_values=values).logits
        mine = load_model(ours).classify(torch.from_numpy(patches((pixels / 255).astype(np.float32)[None], 2)))
    assert_logits_close(mine, theirs)


def test_a_bare_vitmodel_imports_as_an_encoder_whose_states_are_vits(vit_dirs, tmp_path, caplog):
    """ViTModel (its pooler dropped, with a warning): the start of an image classifier (train.init_from)."""
    from transformers import ViTForImageClassification, ViTModel

    from aiayn.interop import import_hf

    body = ViTModel(ViTForImageClassification.from_pretrained(vit_dirs[0]).config)  # with a pooler
    body.load_state_dict(ViTForImageClassification.from_pretrained(vit_dirs[0]).vit.state_dict(), strict=False)
    body.eval().save_pretrained(tmp_path / "hf")
    with caplog.at_level("WARNING"):
        ours = import_hf(tmp_path / "hf", tmp_path / "ours")
    assert "ViTModel's pooler is dropped" in caplog.text
    images = _images()
    with torch.no_grad():
        theirs = body(pixel_values=torch.from_numpy(images)[:, None]).last_hidden_state
        mine = load_model(ours)(torch.from_numpy(patches(images, 2)))
    assert_logits_close(mine, theirs)
