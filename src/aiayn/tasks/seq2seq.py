"""What every text-to-text task shares: the encoder-decoder reads a source and writes a target.

Seed 004 §9 shows three uses of one Transformer: translation, summarization (a long text in, a
short summary out) and question answering (`context [SEP] question` in, the answer out). They
differ only in how examples are read, which end of an over-long source is kept, and what is
measured; everything else is here, once:

    vocabulary  `data.tokenizer` (a directory from `aiayn prepare`), else trained once per run
                on the training text into RUN_DIR/tokenizer (with the task's special symbols)
    data        `examples(split)` -> token ids; sources over `data.max_source_length` tokens are
                truncated (and counted), pairs with a side over `data.max_length` are dropped
    loss        label-smoothed cross-entropy (§5.4) summed over target tokens
    validation  greedy decoding of the validation sources, scored by `scores`
    test        beam search with `[decode]` on `data.test_split`, scored by `report`; writes
                test.hyp and test_scores.json beside the model directory
    inference   `aiayn.decoding.translator.Translator` (with `keep`), built from the model
                directory, whose task.json records what the task needs at inference

A subclass defines `name`, `examples`, `scores` and, if it reports more than it validates,
`report`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from aiayn.config import PAD_ID
from aiayn.data.batching import Batch
from aiayn.data.preprocess import ParallelDataset
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.io import atomic_write
from aiayn.tasks.base import TASK_FILE, read_task_info, run_tokenizers, write_task_info
from aiayn.training.config import DataConfig, TrainConfig
from aiayn.training.distributed import DistInfo
from aiayn.training.loss import LossSums, label_smoothed_loss

log = logging.getLogger(__name__)



@dataclass
class Examples:
    """A split's text. refs[i] holds example i's references; refs[i][0] is its training target.
    groups[i] is a label for per-group scores (the bAbI task), empty when there is none."""

    src: list[str]
    refs: list[list[str]]
    groups: list[int] = field(default_factory=list)

    @property
    def tgt(self) -> list[str]:
        return [r[0] for r in self.refs]

    def head(self, n: int) -> "Examples":
        """The first `n` examples (all when n <= 0)."""
        if n <= 0:
            return self
        return Examples(self.src[:n], self.refs[:n], self.groups[:n])

    def spread(self, n: int) -> "Examples":
        """`n` examples evenly spaced over the split (all when n <= 0), so every group is in."""
        if n <= 0 or n >= len(self.src):
            return self
        idx = [i * len(self.src) // n for i in range(n)]
        return Examples([self.src[i] for i in idx], [self.refs[i] for i in idx],
                        [self.groups[i] for i in idx] if self.groups else [])


class EpochBatches(Sequence):
    """A rank's batches of one epoch, collated on access (so only indices are kept)."""

    def __init__(self, dataset: ParallelDataset, indices: list[list[int]]):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Batch:
        return self.dataset.collate(self.indices[i])


class Seq2SeqTask:
    name = ""
    keep = "start"  # which end of an over-long source survives truncation ("end": the question)
    user_symbols: tuple[str, ...] = ()  # pieces of their own in a trained vocabulary, e.g. "[SEP]"

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.data = cfg, cfg.data
        self.tokenizers: Optional[TokenizerPair] = None
        self.train_set: Optional[ParallelDataset] = None
        self.valid_set: Optional[ParallelDataset] = None
        self.valid_examples: Optional[Examples] = None

    # -- what a subclass says ----------------------------------------------------------------
    def examples(self, split: str) -> Examples:
        raise NotImplementedError

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        """Validation metrics of `hyps` (higher is better unless `metrics.LOWER_IS_BETTER` lists the name)."""
        raise NotImplementedError

    def report(self, hyps: list[str], examples: Examples) -> dict:
        """What the test evaluation writes; by default the validation metrics."""
        return self.scores(hyps, examples)

    def task_info(self) -> dict:
        """More for task.json (the translation task: its language pair, which a server announces)."""
        return {}

    def valid_subset(self, examples: Examples, n: int) -> Examples:
        """The validation examples decoded at each validation (`data.valid_max_sentences`): the first n."""
        return examples.head(n)

    # -- data ---------------------------------------------------------------------------------
    def prepare(self, run_dir: Path, dist: DistInfo, fresh: bool = True) -> None:
        data, t = self.data, time.monotonic()
        self.check_test_split()
        self.tokenizers = self._tokenizers(run_dir, dist, fresh)
        self.train_set = self.dataset(data.train_split).filter(max_len=data.max_length)
        if len(self.train_set) == 0:
            raise ValueError(f"no usable training pairs in {data.corpus} split {data.train_split!r} "
                             f"(all empty, or longer than data.max_length = {data.max_length})")
        if data.valid_split:
            self.valid_set = self.dataset(data.valid_split)
            self.valid_examples = self.valid_subset(self.examples(data.valid_split), data.valid_max_sentences)
        log.info("data ready in %.1f s: %d training pairs (%d dropped as longer than %d tokens), %d validation",
                 time.monotonic() - t, len(self.train_set), self.train_set.stats.n_too_long, data.max_length,
                 len(self.valid_set) if self.valid_set is not None else 0)

    def dataset(self, split: str) -> ParallelDataset:
        """Token ids of `split`; sources truncated to `data.max_source_length` (when set) at the task's end."""
        ex, limit = self.examples(split), self.data.max_source_length
        src = self.tokenizers.src.encode_batch(ex.src)
        if limit:
            n_long = sum(len(s) + 1 > limit for s in src)
            if n_long:
                log.info("%s: %d of %d sources truncated to %d tokens (the %s kept)", split, n_long, len(src),
                         limit, "beginning" if self.keep == "start" else "end")
            room = limit - 1  # EOS is added at collation
            src = [s[:room] if self.keep == "start" else s[max(0, len(s) - room):] for s in src]
        return ParallelDataset.from_ids(src, self.tokenizers.tgt.encode_batch(ex.tgt))

    def check_test_split(self) -> None:
        """A missing test split is an error now, not after the training."""
        if self.data.test_split:
            self.examples(self.data.test_split)

    def train_texts(self) -> tuple[list[str], list[str]]:
        """(sources, targets) of the training split, to build a vocabulary from."""
        ex = self.examples(self.data.train_split)
        return ex.src, ex.tgt

    def _tokenizers(self, run_dir: Path, dist: DistInfo, fresh: bool) -> TokenizerPair:
        return run_tokenizers(self.data, run_dir, dist, fresh, self._build_tokenizers)

    def _build_tokenizers(self) -> TokenizerPair:
        src, tgt = self.train_texts()
        if not any(s.strip() for s in src):
            raise ValueError(f"no usable pairs in {self.data.corpus} split {self.data.train_split!r} "
                             "to build a vocabulary from")
        return build_tokenizers(self.data, src, tgt, self.cfg.train.seed, self.user_symbols)

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
    def translator(self, model):
        from aiayn.decoding.translator import Translator

        return Translator(model, self.tokenizers, self.cfg.decode, **self.inference_options())

    def inference_options(self) -> dict:
        """Translator options that make inference read a source as training did."""
        return {"keep": self.keep, "max_input_tokens": self.data.max_source_length or None}

    def validate(self, model) -> dict[str, float]:
        """`scores` of greedy outputs on the validation examples, when `train.bleu` (decode at validation)."""
        if not (self.cfg.train.bleu and self.valid_examples):
            return {}
        hyps = self.translator(model).translate(self.valid_examples.src, method="greedy")
        return self.scores(hyps, self.valid_examples)

    def test(self, model_dir: Path, device, progress: Optional[Callable[[int], None]] = None) -> Optional[dict]:
        """`report` of the model in `model_dir` on `data.test_split`, decoded with `[decode]`.
        Writes test.hyp and test_scores.json beside `model_dir`. None without a test split."""
        if not self.data.test_split:
            return None
        from aiayn.decoding.translator import Translator

        t, out_dir = time.monotonic(), Path(model_dir).parent
        ex = self.examples(self.data.test_split)
        translator = Translator.from_pretrained(model_dir, device=device, decode=self.cfg.decode,
                                                **self.inference_options())
        hyps = translator.translate(ex.src, progress=progress)
        result = {"split": self.data.test_split, **self.report(hyps, ex), "beam_size": self.cfg.decode.beam_size,
                  "length_penalty": self.cfg.decode.length_penalty, "n_sentences": len(hyps),
                  "seconds": time.monotonic() - t}
        with atomic_write(out_dir / "test.hyp") as tmp:
            tmp.write_text("".join(" ".join(h.splitlines()) + "\n" for h in hyps), encoding="utf-8")
        with atomic_write(out_dir / "test_scores.json") as tmp:
            tmp.write_text(json.dumps(result, indent=2) + "\n")
        return result

    def save_extras(self, model_dir: Path) -> None:
        """The tokenizers and task.json: the task, how its sources are truncated, its decoding defaults."""
        save_tokenizers(self.tokenizers, model_dir)
        write_task_info(model_dir, {"task": self.name, "decode": dataclasses.asdict(self.cfg.decode),
                                    **self.inference_options(), **self.task_info()})


def build_tokenizers(data: DataConfig, src: Sequence[str], tgt: Sequence[str], seed: int,
                     user_symbols: Sequence[str] = ()) -> TokenizerPair:
    """Whitespace symbols, or sentencepiece trained on the training text (joint by default, §3.4)."""
    if data.vocab_type == "symbols":
        if data.corpus == "synthetic":
            from aiayn.data.synthetic import symbols

            return TokenizerPair.shared(SymbolTokenizer(symbols(data.n_symbols)))
        side = lambda texts: sorted({w for t in texts for w in t.split()} | set(user_symbols))  # noqa: E731
        if data.joint_vocab:
            return TokenizerPair.shared(SymbolTokenizer(side(list(src) + list(tgt))))
        return TokenizerPair(SymbolTokenizer(side(src)), SymbolTokenizer(side(tgt)))
    from aiayn.data.tokenizer import train_tokenizers

    return train_tokenizers(src, tgt, vocab_size=data.vocab_size, model_type=data.vocab_type,
                            joint=data.joint_vocab, seed=seed, user_symbols=user_symbols)


class TaskPipeline:
    """Inference for one text-to-text task: a `Translator` built the way the task's model
    directory says (task.json: its decoding defaults, how long sources are cut). Subclasses add
    the task's own call (`Summarizer.summarize`, `QA.answer`); batching and the key/value cache
    are the Translator's."""

    task = ""

    def __init__(self, translator):
        self.translator = translator

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu", **kwargs):
        """Load a model directory written by `aiayn train` for this task. `kwargs` go to `Translator`
        (decode, sampling, max_input_tokens, batch_tokens) and win over task.json."""
        read_task_info(model_dir, expect=cls.task)
        return cls(load_translator(model_dir, device, **kwargs))


def load_translator(model_dir: str | Path, device: str | torch.device = "cpu", **kwargs):
    """A `Translator` for `model_dir` set up as its task.json says (decoding defaults, how sources
    are cut); `kwargs` that are not None win over it."""
    from aiayn.decoding.translator import Translator

    options = {**translator_options(read_task_info(model_dir)), **{k: v for k, v in kwargs.items() if v is not None}}
    return Translator.from_pretrained(model_dir, device=device, **options)


def translator_options(info: dict) -> dict:
    """`Translator` options from a model directory's task.json: its decoding defaults and how its
    sources are cut ({} for a directory without task.json: the Translator's defaults)."""
    from aiayn.config import DecodeConfig

    options = {"keep": info.get("keep", "start"), "max_input_tokens": info.get("max_input_tokens")}
    if "decode" in info:
        try:
            options["decode"] = DecodeConfig(**info["decode"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"{TASK_FILE}: bad decode settings ({e})") from None
    return options
