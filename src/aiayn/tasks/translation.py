"""Translation (§5-§6): parallel text in, sacreBLEU out, `Translator` for inference.

    data        a corpus (`aiayn.data`: a registered name, a {split}.{lang} directory, a TSV
                file) read and tokenized through `load_parallel`, whose cache `aiayn prepare`
                fills; or the built-in synthetic task. Source = ids + EOS, target BOS + y -> y + EOS.
    vocabulary  `data.tokenizer` (a directory written by `aiayn prepare`), else trained once
                per run into RUN_DIR/tokenizer
    loss        label-smoothed cross-entropy (§5.4) summed over target tokens
    validation  greedy sacreBLEU on the validation text (`train.bleu`)
    test        beam search with `[decode]` (beam 4, α 0.6) on `data.test_split`: sacreBLEU
    inference   `aiayn.decoding.translator.Translator`
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from aiayn.config import PAD_ID
from aiayn.data.batching import Batch
from aiayn.data.preprocess import ParallelDataset, load_parallel
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.io import atomic_write
from aiayn.training.config import DataConfig, TrainConfig
from aiayn.training.distributed import DistInfo
from aiayn.training.loss import LossSums, label_smoothed_loss

log = logging.getLogger(__name__)

TOKENIZER_DIR = "tokenizer"


@dataclass
class TextSplit:
    src: list[str]
    tgt: list[str]


class EpochBatches(Sequence):
    """A rank's batches of one epoch, collated on access (so only indices are kept)."""

    def __init__(self, dataset: ParallelDataset, indices: list[list[int]]):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Batch:
        return self.dataset.collate(self.indices[i])


class TranslationTask:
    name = "translation"

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.data = cfg, cfg.data
        self.tokenizers: Optional[TokenizerPair] = None
        self.train_set: Optional[ParallelDataset] = None
        self.valid_set: Optional[ParallelDataset] = None
        self.valid_text: Optional[TextSplit] = None

    # -- data ---------------------------------------------------------------------------------
    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        data, seed, t = self.data, self.cfg.train.seed, time.monotonic()
        self._check_test_split()
        self.tokenizers = self._tokenizers(run_dir, dist, fresh)
        self.train_set = self._dataset(data.train_split).filter(max_len=data.max_length)
        if len(self.train_set) == 0:
            raise ValueError(f"no usable training pairs in {data.corpus} split {data.train_split!r} "
                             f"(all empty, or longer than data.max_length = {data.max_length})")
        if data.valid_split:
            self.valid_set = self._dataset(data.valid_split)
            self.valid_text = read_text(data, data.valid_split, seed, limit=data.valid_max_sentences)  # for BLEU
        log.info("data ready in %.1f s: %d training pairs (%d dropped as longer than %d tokens), %d validation",
                 time.monotonic() - t, len(self.train_set), self.train_set.stats.n_too_long, data.max_length,
                 len(self.valid_set) if self.valid_set is not None else 0)

    def _dataset(self, split: str) -> ParallelDataset:
        """Token ids of `split`: through `load_parallel` and its cache, or the synthetic task's pairs."""
        data = self.data
        if data.corpus == "synthetic":
            text = read_text(data, split, self.cfg.train.seed)
            return ParallelDataset.from_corpus(list(zip(text.src, text.tgt)), self.tokenizers)
        return load_parallel(data.corpus, self.tokenizers, split=split, langs=(data.src_lang, data.tgt_lang),
                             data_dir=data.data_dir or None)

    def _check_test_split(self) -> None:
        """A missing test split is an error now, not after the training."""
        data = self.data
        if data.test_split and data.corpus != "synthetic":
            from aiayn.data.corpus import resolve_source

            resolve_source(data.corpus, data.test_split, (data.src_lang, data.tgt_lang), data.data_dir or None)

    def _tokenizers(self, run_dir: Path, dist: DistInfo, fresh: bool) -> TokenizerPair:
        """`data.tokenizer` if set; else RUN_DIR/tokenizer: built anew by rank 0 for a fresh run
        (whatever an earlier, failed start left there), loaded when resuming."""
        if self.data.tokenizer:
            return load_tokenizers(self.data.tokenizer)
        directory = run_dir / TOKENIZER_DIR
        if dist.is_main and (fresh or not (directory / "tokenizer.json").is_file()):
            t = time.monotonic()
            train = read_text(self.data, self.data.train_split, self.cfg.train.seed)
            if not any(s.strip() for s in train.src):
                raise ValueError(f"no usable pairs in {self.data.corpus} split {self.data.train_split!r} "
                                 "to build a vocabulary from")
            save_tokenizers(build_tokenizers(self.data, train, self.cfg.train.seed), directory)
            log.info("vocabulary built in %.1f s -> %s", time.monotonic() - t, directory)
        if dist.enabled:
            torch.distributed.barrier()
        return load_tokenizers(directory)

    def model_spec(self):
        """`[model] type`: the encoder-decoder (default) or another sequence-to-sequence model, e.g. "rnn"."""
        return self.cfg.model.type, self.cfg.model.build(self.tokenizers.src.vocab_size, self.tokenizers.tgt.vocab_size)

    def train_data(self, dist: DistInfo) -> Callable[[int], EpochBatches]:
        """epoch -> this rank's deterministic batches; `max_tokens` bounds src.numel() + tgt_in.numel()."""
        data = self.data
        sampler = self.train_set.sampler(data.max_tokens, seed=self.cfg.train.seed, rank=dist.rank,
                                         world_size=dist.world_size, skip_overlong=True,
                                         sort_by_length=data.batching == "bucket")
        return lambda epoch: EpochBatches(self.train_set, sampler.batches(epoch))

    def valid_data(self) -> Optional[list[Batch]]:
        if self.valid_set is None:
            return None
        sampler = self.valid_set.sampler(self.data.max_tokens, shuffle=False, skip_overlong=True)
        return list(EpochBatches(self.valid_set, sampler.batches(0)))

    # -- training -------------------------------------------------------------------------
    def loss(self, model, batch: Batch) -> LossSums:
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        with torch.autocast(logits.device.type, enabled=False):  # the loss runs in fp32 (see training.loss)
            return label_smoothed_loss(logits, batch.tgt_out, self.cfg.optim.label_smoothing, PAD_ID)

    def n_targets(self, batch: Batch) -> int:
        return batch.n_tgt_tokens

    # -- validation, test, inference --------------------------------------------------------
    def validate(self, model) -> dict[str, float]:
        """Greedy sacreBLEU on the validation text, when `train.bleu`."""
        if not (self.cfg.train.bleu and self.valid_text):
            return {}
        from aiayn import metrics
        from aiayn.decoding.translator import Translator

        translator = Translator(model, self.tokenizers, self.cfg.decode)
        hyps = translator.translate(self.valid_text.src, method="greedy")
        return {"bleu": metrics.bleu(hyps, self.valid_text.tgt).score}

    def test(self, model_dir: Path, device, progress: Optional[Callable[[int], None]] = None) -> Optional[dict]:
        """sacreBLEU of the model in `model_dir` on `data.test_split`, decoded with `[decode]`.
        Writes test.hyp and test_scores.json beside `model_dir`. None without a test split."""
        if not self.data.test_split:
            return None
        from aiayn import metrics
        from aiayn.decoding.translator import Translator

        t, out_dir = time.monotonic(), Path(model_dir).parent
        text = read_text(self.data, self.data.test_split, self.cfg.train.seed)
        translator = Translator.from_pretrained(model_dir, device=device, decode=self.cfg.decode)
        hyps = translator.translate(text.src, progress=progress)
        score = metrics.bleu(hyps, text.tgt)
        result = {"split": self.data.test_split, "bleu": score.score, "detail": score.detail,
                  "signature": score.signature, "beam_size": self.cfg.decode.beam_size,
                  "length_penalty": self.cfg.decode.length_penalty, "n_sentences": len(hyps),
                  "seconds": time.monotonic() - t}
        with atomic_write(out_dir / "test.hyp") as tmp:
            tmp.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        with atomic_write(out_dir / "test_scores.json") as tmp:
            tmp.write_text(json.dumps(result, indent=2) + "\n")
        return result

    def save_extras(self, model_dir: Path) -> None:
        save_tokenizers(self.tokenizers, model_dir)


# -- text and vocabularies ---------------------------------------------------------------------
def read_text(data: DataConfig, split: str, seed: int, limit: int = 0) -> TextSplit:
    """Raw sentence pairs of `split` (the first `limit` when > 0): the corpus' text, or the synthetic task's."""
    if data.corpus == "synthetic":
        from aiayn.data.synthetic import synthetic_pairs

        n, offset = (data.n_train, 0) if split == data.train_split else (data.n_valid, 1 if split == data.valid_split else 2)
        pairs = synthetic_pairs(data.task, n, seed=seed + offset, n_symbols=data.n_symbols,
                                min_len=data.min_len, max_len=data.max_len)
        text = TextSplit([s for s, _ in pairs], [t for _, t in pairs])
    else:
        from aiayn.data.corpus import read_corpus

        corpus = read_corpus(data.corpus, split=split, langs=(data.src_lang, data.tgt_lang),
                             data_dir=data.data_dir or None)
        text = TextSplit(corpus.src, corpus.tgt)
    return TextSplit(text.src[:limit], text.tgt[:limit]) if limit else text


def build_tokenizers(data: DataConfig, train: TextSplit, seed: int) -> TokenizerPair:
    if data.vocab_type == "symbols":
        if data.corpus == "synthetic":
            from aiayn.data.synthetic import symbols

            return TokenizerPair.shared(SymbolTokenizer(symbols(data.n_symbols)))
        side = lambda texts: sorted({w for t in texts for w in t.split()})  # noqa: E731
        if data.joint_vocab:
            return TokenizerPair.shared(SymbolTokenizer(side(train.src + train.tgt)))
        return TokenizerPair(SymbolTokenizer(side(train.src)), SymbolTokenizer(side(train.tgt)))
    from aiayn.data.tokenizer import train_tokenizers

    return train_tokenizers(train.src, train.tgt, vocab_size=data.vocab_size, model_type=data.vocab_type,
                            joint=data.joint_vocab, seed=seed)
