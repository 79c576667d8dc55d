"""Small fixtures shared by the training tests: a tiny model and hand-made batches."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from typing import Callable

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, OptimConfig, TransformerConfig
from aiayn.distributed import SINGLE
from aiayn.tasks.loss import label_smoothed_loss
from aiayn.training.schedule import lr_function
from aiayn.training.trainer import Trainer

VOCAB = 12


@dataclass
class SimpleBatch:
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_tgt_tokens: int

    def to(self, device) -> "SimpleBatch":
        return SimpleBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.n_tgt_tokens)


class Seq2SeqTask:
    """The trainer's view of a task, for hand-made batches: the label-smoothed loss,
    optional extra validation metrics, nothing to add to a model directory."""

    def __init__(self, label_smoothing: float, metrics: Callable[[object], dict] | None = None,
                 lower_is_better: tuple[str, ...] = ()):
        self.label_smoothing, self.metrics, self.lower_is_better = label_smoothing, metrics, lower_is_better

    def loss(self, model, batch):
        return label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, self.label_smoothing, PAD_ID)

    def n_targets(self, batch) -> int:
        return batch.n_tgt_tokens

    def validate(self, model) -> dict:
        return self.metrics(model) if self.metrics else {}

    def save_extras(self, model_dir) -> None:
        pass


def make_trainer(model, optim: OptimConfig, run, run_dir, train_data, valid_data=None, metrics=None,
                 dist=SINGLE, lower_is_better: tuple[str, ...] = ()) -> Trainer:
    lr_at = lr_function(run.schedule, model.config.d_model, optim.warmup_steps, optim.lr_factor)
    return Trainer(model, Seq2SeqTask(optim.label_smoothing, metrics, lower_is_better), optim, run, run_dir,
                   train_data, lr_at, valid_data=valid_data, dist=dist)


def tiny_config(**overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", src_vocab_size=VOCAB, **overrides)


def make_batch(pairs: list[tuple[list[int], list[int]]]) -> SimpleBatch:
    """Pad (src ids, tgt ids) pairs: tgt_in = BOS + tgt, tgt_out = tgt + EOS."""
    S = max(len(s) for s, _ in pairs)
    T = max(len(t) for _, t in pairs) + 1
    src = torch.full((len(pairs), S), PAD_ID)
    tin = torch.full((len(pairs), T), PAD_ID)
    tout = torch.full((len(pairs), T), PAD_ID)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(s)
        tin[i, : len(t) + 1] = torch.tensor([BOS_ID] + t)
        tout[i, : len(t) + 1] = torch.tensor(t + [EOS_ID])
    return SimpleBatch(src, tin, tout, int((tout != PAD_ID).sum()))


def reverse_pairs(n: int, seed: int, min_len: int = 2, max_len: int = 6) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = [rng.randrange(4, VOCAB) for _ in range(rng.randint(min_len, max_len))]
        out.append((s, s[::-1]))
    return out


def batches(n_batches: int, per_batch: int, seed: int) -> list[SimpleBatch]:
    pairs = reverse_pairs(n_batches * per_batch, seed)
    return [make_batch(pairs[i * per_batch:(i + 1) * per_batch]) for i in range(n_batches)]
