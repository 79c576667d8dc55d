"""Image classification with patches as tokens (ViT; Dosovitskiy et al., 2021): seed 004 §11.

    data        `data.corpus = "sklearn:digits"`: the 1,797 8x8 handwritten digits scikit-learn
                ships (`sklearn.datasets.load_digits`, no download; the `aiayn[vision]` extra).
                A fixed split from a seeded permutation (seed `SPLIT_SEED`, whatever the training
                seed): 70% train, 10% validation, 20% test. Pixels (0..16) are scaled to [0, 1].
    tokens      the image cut into `data.patch_size` squares, each flattened (ViT §3.1):
                (B, N, patch²) for N = (8 / patch)² patches; the model maps them linearly to
                d_model and puts a learned [CLS] vector first (`aiayn.models.encoder_only`)
    loss, metrics  as `aiayn.tasks.classify` (cross-entropy of the [CLS] head; accuracy)
    inference   `ImageClassifier`: `aiayn classify` with one image per line (a JSON array of pixel
                rows in [0, 1]), POST /v1/classify {"image": ...}; `aiayn plot attention --image N`
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from aiayn.decoding.attention_maps import patch_attention
from aiayn.distributed import SINGLE, DistInfo
from aiayn.model_dir import read_task_info, task_field, write_task_info
from aiayn.models import load_model
from aiayn.runtime import MissingExtra
from aiayn.tasks.classify import Classifier, ClassifyTask, TextBatch, labels_of, refuse_options
from aiayn.tasks.pipeline import RequestError
from aiayn.tasks.settings import SplitSettings, check_positive

log = logging.getLogger(__name__)

SPLIT_SEED = 0
SPLIT = {"train": (0.0, 0.7), "valid": (0.7, 0.8), "test": (0.8, 1.0)}  # fractions of the permutation


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float32 in [0, 1], labels (1797,) int64) from scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise MissingExtra("the digits come with scikit-learn: pip install 'aiayn[vision]'") from None
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


@dataclass(frozen=True)
class ImageData(SplitSettings):
    corpus: str = "sklearn:digits"
    valid_split: str = "valid"
    patch_size: int = 2  # the side of the square patches (ViT)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "patch_size")


class ImageClassifier(Classifier):
    """`load_pipeline(DIR)([image, ...])` -> [(label, probability)]: an image is (H, W) pixels in [0, 1]."""

    task, command, metric = "image-classify", "classify", "accuracy"
    routes = "aiayn.serve.routes.classify:IMAGE_ROUTES"
    lines = "aiayn.commands.lines:IMAGES"
    load_options = ()
    reads_images = True

    def __init__(self, model, labels: list[str], patch_size: int):
        self.model, self.labels, self.patch_size = model.eval(), labels, patch_size

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device="cpu") -> "ImageClassifier":
        info = read_task_info(model_dir, expect=cls.task)
        patch_size = task_field(info, model_dir, "patch_size", int, "the side of a patch in pixels")
        return cls(load_model(model_dir, device=device), labels_of(info, model_dir), patch_size)

    def prepare(self, images: Sequence) -> list[np.ndarray]:
        """Images -> (N, p²) patches each. An image that is not a grid of numbers in [0, 1], one of more
        patches than the model has positions, or images of two sizes in one call are errors."""
        out = []
        wrong = RequestError("an image is a list of pixel rows, each a list of numbers in [0, 1]")
        for image in images:
            try:
                pixels = np.asarray(image, dtype=np.float32)
            except (TypeError, ValueError):  # strings (e.g. form fields), ragged rows
                raise wrong from None
            if pixels.ndim != 2 or not pixels.size or not np.isfinite(pixels).all() or pixels.min() < 0 or pixels.max() > 1:
                raise wrong
            try:
                out.append(patches(pixels[None], self.patch_size)[0])  # (N, p²)
            except ValueError as e:
                raise RequestError(str(e)) from None
            self._check_size(out[-1], out[0], pixels.shape)
        return out

    def _check_size(self, cut: np.ndarray, first: np.ndarray, shape: tuple) -> None:
        """An image's patches (N, p²) fit the model's positions ([CLS] is one) and match the first image's."""
        most = self.model.config.max_positions - 1
        if len(cut) > most:
            raise RequestError(f"a {shape[0]}x{shape[1]} image makes {len(cut)} patches of {self.patch_size}x"
                               f"{self.patch_size}; this model takes at most {most}")
        if cut.shape != first.shape:
            raise RequestError("the images of one request must be one size")

    def run(self, items: list, progress=None, batch_size: int = 64, **options) -> list[tuple[str, float]]:
        refuse_options(self.task, options)
        return self.decide(items, progress, batch_size)

    def batch(self, inputs: list, device) -> torch.Tensor:
        return torch.from_numpy(np.stack(inputs)).to(device)  # (B, N, p²)

    def attention(self, index: int, **output_limits):
        """[CLS]'s attention to the patches of test image number `index` of the digits."""
        images, labels = load_digits()
        chosen = split_indices(len(labels), "test")
        if not 0 <= index < len(chosen):
            raise ValueError(f"image {index} out of range: the test split has images 0..{len(chosen) - 1}")
        image = images[chosen[index]]
        return patch_attention(self.model, image, self.patch_size, patches(image[None], self.patch_size)[0],
                               self.labels, self.labels[int(labels[chosen[index]])])


class ImageClassifyTask(ClassifyTask):
    name = "image-classify"
    data_config = ImageData
    pipeline = ImageClassifier

    def check_input_length(self) -> None:
        """Not needed: every image makes as many patches, so a model with too few positions fails at its
        first batch (the encoder says so), before any update is lost."""

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
        n, dim = self.splits[self.data.train_split][0].shape[1:]
        return self.cfg.model.type, self.cfg.model.build(1, 1, n_classes=len(self.labels), input="patches",
                                                         patch_dim=int(dim))  # 1: patches have no vocabulary

    def collate(self, split: str, indices: Sequence[int], epoch: int = 0, number: int = 0) -> TextBatch:
        images, labels = self.splits[split]
        return TextBatch(torch.from_numpy(images[list(indices)]), torch.tensor([labels[i] for i in indices]))

    def save_extras(self, model_dir: Path) -> None:
        write_task_info(model_dir, {"task": self.name, "labels": self.labels, "patch_size": self.data.patch_size})
