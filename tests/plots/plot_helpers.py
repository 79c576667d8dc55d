"""Helpers shared by the plot tests."""

from __future__ import annotations

import numpy as np
import torch

from aiayn.config import TransformerConfig
from aiayn.models.transformer import Transformer

SYMBOLS = list("abcdefghij")


def png_pixels(path) -> np.ndarray:
    """(height, width, channels) floats in [0, 1] of a PNG file."""
    import matplotlib.image

    return matplotlib.image.imread(str(path))


def assert_picture(path, size: tuple[int, int], min_std: float = 0.05) -> None:
    """The file is a PNG of exactly `size` (width, height) pixels and is not blank."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = png_pixels(path)
    assert (pixels.shape[1], pixels.shape[0]) == size
    assert pixels[..., :3].std() > min_std, "picture looks blank"


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=4 + len(SYMBOLS), dropout=0.0, **overrides)
    return Transformer(cfg).eval()
