"""Masked-language-model pre-training with the encoder-only model: BERT's objective (Devlin et
al., 2019, §3.1) on the texts of a classification corpus (`aiayn.tasks.classify`'s data, labels
unused), so a classifier can start from the model (`train.init_from`) with its vocabulary.

    masking     15% of the tokens are chosen; of those 80% become [MASK], 10% a random token,
                10% stay; the loss covers the chosen positions only. The choice is drawn per
                batch from (seed, epoch, batch), so a resumed run masks the same way.
    more text   `data.extra_texts`: plain-text files added to the training texts, not to the vocabulary
    inference   none: the model is a start for `aiayn train` (`MLMPipeline` says so)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from aiayn.config import PAD_ID
from aiayn.data.corpus import read_lines
from aiayn.data.tokenizer import N_SPECIALS
from aiayn.decoding.common import pad_sources
from aiayn.distributed import DistInfo
from aiayn.tasks.classify import MASK, ClassifyData, ClassifyTask, TextBatch
from aiayn.tasks.loss import LossSums, add_ponder_cost, label_smoothed_loss, ponder_weight
from aiayn.tasks.pipeline import NoPipeline

log = logging.getLogger(__name__)

MASK_RATE, MASK_AS_MASK, MASK_AS_RANDOM = 0.15, 0.8, 0.1  # BERT §3.1 (the remaining 10% stay)


def mask_id_of(tokenizer) -> int:
    """The id of "[MASK]", a piece of its own, among the ids of its encoding (sentencepiece may put "▁"
    before it; an imported BERT tokenizer wraps it in [CLS] ... [SEP])."""
    ids = [i for i in tokenizer.encode(MASK) if i >= N_SPECIALS and tokenizer.pieces([i]) == [MASK]]
    if len(ids) != 1:
        raise ValueError(f"the {tokenizer.kind} tokenizer has no {MASK} piece: MLM needs one")
    return ids[0]


def mask_tokens(tokens: torch.Tensor, mask_id: int, vocab_size: int, generator: torch.Generator):
    """BERT's masking of (B, T) ids -> (inputs, targets): targets hold the original id at the
    chosen positions and PAD elsewhere; PAD positions are never chosen."""
    real = tokens != PAD_ID
    draw = lambda: torch.rand(tokens.shape, generator=generator)  # noqa: E731
    chosen = real & (draw() < MASK_RATE)
    how = draw()
    as_mask = chosen & (how < MASK_AS_MASK)
    as_random = chosen & (how >= MASK_AS_MASK) & (how < MASK_AS_MASK + MASK_AS_RANDOM)
    random_ids = torch.randint(N_SPECIALS, vocab_size, tokens.shape, generator=generator)
    inputs = torch.where(as_mask, torch.full_like(tokens, mask_id), torch.where(as_random, random_ids, tokens))
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, PAD_ID))


@dataclass(frozen=True)
class MLMData(ClassifyData):
    """ClassifyData, and more text for the masked language model alone."""

    # plain-text files (.gz allowed), one text per line, added to the training texts (not to the
    # vocabulary, which stays the task's own, so the classifier that starts from this model reads
    # its texts as the MLM did); blank lines skipped, long lines cut as any text is
    extra_texts: tuple[str, ...] = ()
    lowercase_extra_texts: bool = False  # for a lower-cased task (SST-2), whose vocabulary has few capitals

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "extra_texts", tuple(self.extra_texts))  # TOML gives a list


class MLMPipeline(NoPipeline):
    task = "mlm"
    use = "start a classifier from it with train.init_from (recipes/sst2-classify.toml)"


class MLMTask(ClassifyTask):
    """Masked-language-model pre-training on the texts of the classification files (labels unused)."""

    name = "mlm"
    metrics: tuple[str, ...] = ()  # the loss only
    data_config = MLMData
    pipeline = MLMPipeline

    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        """ClassifyTask's, then data.extra_texts appended to the training split (label index -1: none)."""
        super().prepare(run_dir, dist, fresh)
        if not self.data.extra_texts:
            return

        texts = [t.lower() if self.data.lowercase_extra_texts else t
                 for path in self.data.extra_texts for t in read_lines(path) if t]
        ids, labels = self.splits[self.data.train_split]
        more = self.token_ids("extra_texts", texts)
        self.splits[self.data.train_split] = ids + more, labels + [-1] * len(more)
        log.info("%d more training texts from %s", len(more), ", ".join(self.data.extra_texts))

    @property
    def mask_id(self) -> int:
        """The id of "[MASK]" in whichever tokenizers the task has (prepared, restored or imported)."""
        return mask_id_of(self.tokenizers.src)

    def n_classes(self) -> int:
        return 0

    def collate(self, split: str, indices: Sequence[int], epoch: int = 0, number: int = 0) -> TextBatch:
        ids, _ = self.splits[split]
        tokens = pad_sources([ids[i] for i in indices], PAD_ID)
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence(
            [self.cfg.train.seed, epoch, number, 0 if split == self.data.train_split else 1]).generate_state(1)[0]))
        inputs, targets = mask_tokens(tokens, self.mask_id, self.tokenizers.src.vocab_size, generator)
        return TextBatch(inputs, targets)

    def loss(self, model, batch: TextBatch) -> LossSums:
        chosen = batch.targets != PAD_ID  # (B, T): the positions in the loss
        logits, ponder = model(batch.tokens, head="mlm", chosen=chosen, with_ponder=True)  # (M, V)
        sums = label_smoothed_loss(logits, batch.targets[chosen], self.cfg.optim.label_smoothing, PAD_ID)
        return add_ponder_cost(sums, ponder, ponder_weight(model))

    def n_targets(self, batch: TextBatch) -> int:
        return int((batch.targets != PAD_ID).sum())

    def validate(self, model) -> dict[str, float]:
        return {}

    def test(self, model_dir: Path, device, progress=None) -> Optional[dict]:
        return None
