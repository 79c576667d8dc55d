"""From a `TrainConfig` to a trained model directory: the glue between data and trainer.

    run_dir/config.toml      the resolved config (read back by --resume)
    run_dir/tokenizer/       the vocabulary, trained once (rank 0) and reused on resume
    run_dir/checkpoints/     see aiayn.training.checkpoint
    run_dir/metrics.jsonl    see aiayn.training.metrics
    run_dir/model/           the final self-contained model: config, weights, tokenizer

Batches come from `aiayn.data` (`ParallelDataset.sampler` + `collate`): source = ids + EOS,
the convention of the decoders and the `Translator`; target BOS + y -> y + EOS.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from aiayn.data.batching import Batch
from aiayn.data.preprocess import ParallelDataset
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, load_tokenizers, save_tokenizers
from aiayn.model import Transformer
from aiayn.training import checkpoint as ckpt
from aiayn.training.config import DataConfig, TrainConfig, save_config
from aiayn.training.distributed import SINGLE, DistInfo, init_from_env, shutdown
from aiayn.training.trainer import FitResult, Trainer

log = logging.getLogger(__name__)

TOKENIZER_DIR = "tokenizer"


@dataclass
class TextSplit:
    src: list[str]
    tgt: list[str]


# -- corpus text and tokenizers -------------------------------------------------------------
def read_text(data: DataConfig, split: str, seed: int) -> TextSplit:
    """Raw sentence pairs of `split` ("train"/"valid"/"test" for the synthetic task)."""
    if data.corpus == "synthetic":
        from aiayn.data.synthetic import synthetic_pairs

        n, offset = (data.n_train, 0) if split == data.train_split else (data.n_valid, 1 if split == data.valid_split else 2)
        pairs = synthetic_pairs(data.task, n, seed=seed + offset, n_symbols=data.n_symbols,
                                min_len=data.min_len, max_len=data.max_len)
        return TextSplit([s for s, _ in pairs], [t for _, t in pairs])
    from aiayn.data.corpus import read_corpus

    corpus = read_corpus(data.corpus, split=split, langs=(data.src_lang, data.tgt_lang),
                         data_dir=data.data_dir or None)
    return TextSplit(corpus.src, corpus.tgt)


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


def tokenizers_for_run(cfg: TrainConfig, run_dir: Path, train: TextSplit, dist: DistInfo) -> TokenizerPair:
    """Load run_dir/tokenizer if present (resume), else rank 0 trains and saves it."""
    directory = run_dir / TOKENIZER_DIR
    if dist.is_main and not (directory / "tokenizer.json").is_file():
        t = time.monotonic()
        save_tokenizers(build_tokenizers(cfg.data, train, cfg.train.seed), directory)
        log.info("vocabulary built in %.1f s -> %s", time.monotonic() - t, directory)
    if dist.enabled:
        torch.distributed.barrier()
    return load_tokenizers(directory)


# -- datasets and batches -------------------------------------------------------------------
def encode(text: TextSplit, tokenizers: TokenizerPair) -> ParallelDataset:
    """Token ids without BOS/EOS; `collate` adds the source EOS and BOS/EOS on the target."""
    return ParallelDataset.from_corpus(list(zip(text.src, text.tgt)), tokenizers)


class EpochBatches(Sequence):
    """A rank's batches of one epoch, collated on access (so only indices are kept)."""

    def __init__(self, dataset: ParallelDataset, indices: list[list[int]]):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Batch:
        return self.dataset.collate(self.indices[i])


def epoch_data(dataset: ParallelDataset, data: DataConfig, seed: int, dist: DistInfo) -> Callable[[int], EpochBatches]:
    """epoch -> this rank's deterministic token-bucketed batches; `max_tokens` bounds
    src.numel() + tgt_in.numel() of each."""
    if data.batching == "random":
        return lambda epoch: EpochBatches(dataset, random_batches(dataset, data.max_tokens, seed, epoch, dist))
    sampler = dataset.sampler(data.max_tokens, seed=seed, rank=dist.rank, world_size=dist.world_size,
                              skip_overlong=True)
    return lambda epoch: EpochBatches(dataset, sampler.batches(epoch))


def random_batches(dataset: ParallelDataset, max_tokens: int, seed: int, epoch: int, dist: DistInfo) -> list[list[int]]:
    """Examples in a seeded random order, packed greedily under the same padded-cost budget
    as the token-bucket sampler, but with mixed lengths in every batch (more padding; helps
    tiny synthetic tasks, where length-sorted batches give biased updates). Each rank gets
    every world_size-th batch; the remainder batches are dropped so counts are equal."""
    order = np.random.default_rng([seed, epoch]).permutation(len(dataset))
    src, tgt = dataset.src_lengths + 1, dataset.tgt_lengths + 1  # + EOS / + BOS
    batches, current, max_s, max_t = [], [], 0, 0
    for i in order.tolist():
        s, t = max(max_s, int(src[i])), max(max_t, int(tgt[i]))
        if current and (len(current) + 1) * (s + t) > max_tokens:
            batches.append(current)
            current, s, t = [], int(src[i]), int(tgt[i])
        current.append(i)
        max_s, max_t = s, t
    batches.append(current)
    usable = len(batches) - len(batches) % dist.world_size
    return batches[:usable][dist.rank::dist.world_size]


def valid_batches(dataset: ParallelDataset, max_tokens: int) -> list[Batch]:
    sampler = dataset.sampler(max_tokens, shuffle=False, skip_overlong=True)
    return list(EpochBatches(dataset, sampler.batches(0)))


def bleu_function(text: TextSplit, tokenizers: TokenizerPair, cfg: TrainConfig) -> Callable[[Transformer], float]:
    """model -> sacreBLEU (default 13a tokenization) of greedy translations of `text`."""
    import sacrebleu

    from aiayn.translator import Translator

    def bleu(model: Transformer) -> float:
        translator = Translator(model, tokenizers, cfg.decode)
        hyps = translator.translate(text.src, method="greedy")
        return sacrebleu.corpus_bleu(hyps, [text.tgt]).score
    return bleu


# -- the whole run --------------------------------------------------------------------------
def resolve_device(name: str, dist: DistInfo) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("train.device = 'cuda' but no CUDA device is available")
        if dist.enabled and name == "cuda":
            name = f"cuda:{dist.local_rank}"
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_run_dir(cfg: TrainConfig, resume: bool) -> Path:
    run_dir = Path(cfg.train.run_dir)
    if not resume and ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR) is not None:
        raise ValueError(f"{run_dir} already holds checkpoints; use --resume {run_dir} or another train.run_dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def train(cfg: TrainConfig, resume: bool = False, dist: Optional[DistInfo] = None) -> FitResult:
    """Train per `cfg` into `cfg.train.run_dir`; with `resume`, continue from its last checkpoint."""
    run, data = cfg.train, cfg.data
    dist = dist or init_from_env("cuda" if run.device.startswith("cuda") or
                                 (run.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        device = resolve_device(run.device, dist)
        if run.num_threads:
            torch.set_num_threads(run.num_threads)
        run_dir = prepare_run_dir(cfg, resume) if dist.is_main else Path(run.run_dir)
        if dist.is_main:
            save_config(cfg, run_dir)
        seed_everything(run.seed)
        t = time.monotonic()
        train_text = read_text(data, data.train_split, run.seed)
        tokenizers = tokenizers_for_run(cfg, run_dir, train_text, dist)
        train_set = encode(train_text, tokenizers).filter(max_len=data.max_length)
        valid_text = read_text(data, data.valid_split, run.seed) if data.valid_split else None
        if valid_text and data.valid_max_sentences:
            valid_text = TextSplit(valid_text.src[:data.valid_max_sentences], valid_text.tgt[:data.valid_max_sentences])
        log.info("data ready in %.1f s: %d training pairs (%d dropped as longer than %d tokens), %d validation",
                 time.monotonic() - t, len(train_set), train_set.stats.n_too_long, data.max_length,
                 len(valid_text.src) if valid_text else 0)
        model_cfg = cfg.model.build(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
        seed_everything(run.seed)  # the same initial weights whatever the data preparation drew
        model = Transformer(model_cfg).to(device)
        log.info("model: %s parameters (%s)", f"{model.num_parameters():,}", cfg.model.preset)

        def add_tokenizer(model_dir: Path) -> None:
            save_tokenizers(tokenizers, model_dir)

        trainer = Trainer(
            model, cfg.optim, run, run_dir, epoch_data(train_set, data, run.seed, dist),
            valid_data=valid_batches(encode(valid_text, tokenizers), data.max_tokens) if valid_text else None,
            bleu_fn=bleu_function(valid_text, tokenizers, cfg) if valid_text and run.bleu else None,
            on_model_dir=add_tokenizer, dist=dist,
        )
        if resume:
            last = ckpt.latest_checkpoint(run_dir / ckpt.CHECKPOINT_DIR)
            if last is None:
                raise FileNotFoundError(f"{run_dir / ckpt.CHECKPOINT_DIR}: no checkpoint to resume from")
            trainer.resume(last)
        return trainer.fit()
    finally:
        shutdown()


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config saved in `run_dir`, with `--set` overrides (e.g. a larger budget)."""
    from aiayn.training.config import CONFIG_NAME, load_config

    path = Path(run_dir) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; is {run_dir} a training run directory?")
    return load_config(path, [f"train.run_dir={run_dir}", *overrides])


def evaluate_test(cfg: TrainConfig, progress: bool = False) -> dict:
    """sacreBLEU of the final model (run_dir/model) on `data.test_split`, decoded with
    `[decode]` (beam 4, α 0.6 by default). Writes run_dir/test.hyp and run_dir/test_scores.json."""
    import json

    import sacrebleu

    from aiayn.io import atomic_write
    from aiayn.translator import Translator

    run_dir, t = Path(cfg.train.run_dir), time.monotonic()
    text = read_text(cfg.data, cfg.data.test_split, cfg.train.seed)
    device = resolve_device(cfg.train.device, SINGLE)
    translator = Translator.from_pretrained(run_dir / "model", device=device, decode=cfg.decode)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(text.src), desc="test", unit="sent")
    hyps = translator.translate(text.src, progress=bar.update if bar else None)
    if bar:
        bar.close()
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyps, [text.tgt])
    result = {"split": cfg.data.test_split, "bleu": score.score, "detail": str(score),
              "signature": str(bleu.get_signature()), "beam_size": cfg.decode.beam_size,
              "length_penalty": cfg.decode.length_penalty, "n_sentences": len(hyps),
              "seconds": time.monotonic() - t}
    with atomic_write(run_dir / "test.hyp") as tmp:
        tmp.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    with atomic_write(run_dir / "test_scores.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    return result
