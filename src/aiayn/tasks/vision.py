"""Image classification with patches as tokens (ViT; Dosovitskiy et al., 2021): seed 004 §11.

    data        `data.corpus = "sklearn:digits"`: the 1,797 8x8 handwritten digits scikit-learn
                ships (`sklearn.datasets.load_digits`, no download; the `aiayn[vision]` extra).
                A fixed split from a seeded permutation (seed `SPLIT_SEED`, whatever the training
                seed): 70% train, 10% validation, 20% test. Pixels (0..16) are scaled to [0, 1].
    tokens      the image cut into `data.patch_size` squares, each flattened (ViT §3.1):
                (B, N, patch²) for N = (8 / patch)² patches; the model maps them linearly to
                d_model and puts a learned [CLS] vector first (`aiayn.models.encoder_only`)
    loss, metrics  as `aiayn.tasks.classify` (cross-entropy of the [CLS] head; accuracy)
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from aiayn.tasks.classify import ClassifyTask, TextBatch
from aiayn.tasks.base import write_task_info
from aiayn.training.distributed import SINGLE, DistInfo

log = logging.getLogger(__name__)

SPLIT_SEED = 0
SPLIT = {"train": (0.0, 0.7), "valid": (0.7, 0.8), "test": (0.8, 1.0)}  # fractions of the permutation


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float32 in [0, 1], labels (1797,) int64) from scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise ImportError("the digits come with scikit-learn: pip install 'aiayn[vision]'") from None
    digits = sklearn_digits()
    return (digits.images / 16.0).astype(np.float32), digits.target.astype(np.int64)


def patches(images: np.ndarray, size: int) -> np.ndarray:
    """(B, H, W) -> (B, H/size · W/size, size²): non-overlapping squares, row by row, each flattened."""
    B, H, W = images.shape
    if H % size or W % size:
        raise ValueError(f"patch size {size} does not divide the {H}x{W} images")
    grid = images.reshape(B, H // size, size, W // size, size).transpose(0, 1, 3, 2, 4)
    return grid.reshape(B, (H // size) * (W // size), size * size)


def split_indices(n: int, split: str) -> np.ndarray:
    """Indices of the digits in `split` ("train", "valid" or "test"): a fixed, seeded permutation cut
    by `SPLIT`'s fractions."""
    if split not in SPLIT:
        raise ValueError(f"digits splits are {', '.join(SPLIT)}, not {split!r}")
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    lo, hi = (int(f * n) for f in SPLIT[split])
    return order[lo:hi]


class ImageClassifyTask(ClassifyTask):
    name = "image-classify"

    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        if self.data.corpus != "sklearn:digits":
            raise ValueError(f"task image-classify reads data.corpus = 'sklearn:digits', not {self.data.corpus!r}")
        t = time.monotonic()
        images, labels = load_digits()
        tokens = patches(images, self.data.patch_size)
        self.labels = [str(d) for d in range(10)]
        for split in filter(None, (self.data.train_split, self.data.valid_split, self.data.test_split)):
            chosen = split_indices(len(labels), split)
            self.splits[split] = (tokens[chosen], labels[chosen].tolist())
        log.info("digits ready in %.1f s: %s images, patches %s", time.monotonic() - t,
                 {k: len(v[1]) for k, v in self.splits.items()}, self.splits[self.data.train_split][0].shape[1:])

    def restore(self, model_dir: Path) -> None:
        self.prepare(model_dir, SINGLE)

    def model_spec(self):
        """`[model] type = "encoder-only"` with `input = "patches"`, sized to the patches and labels."""
        import dataclasses

        config = self.cfg.model.build(1, 1)
        n, dim = self.splits[self.data.train_split][0].shape[1:]
        return self.cfg.model.type, dataclasses.replace(config, n_classes=len(self.labels), input="patches",
                                                        patch_dim=int(dim))

    def collate(self, split: str, indices: Sequence[int], epoch: int = 0, number: int = 0) -> TextBatch:
        images, labels = self.splits[split]
        return TextBatch(torch.from_numpy(images[list(indices)]), torch.tensor([labels[i] for i in indices]))

    def save_extras(self, model_dir: Path) -> None:
        write_task_info(model_dir, {"task": self.name, "labels": self.labels, "patch_size": self.data.patch_size})
