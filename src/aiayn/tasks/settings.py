"""The `[data]` sections the built-in tasks build theirs from. A task's own section is a frozen
dataclass named by its `data_config` attribute (e.g. `translation.TranslationData`); a recipe is
checked against that class only, so a field of another task is an error (`training.config`).
Each name means one thing in every task that has it:

    max_tokens        padded tokens per micro-batch
    max_length        a training pair with a longer side is dropped (counted)
    max_input_tokens  a longer input is cut to this many tokens (counted), in training and inference
    valid_fraction    the share of the training text held out for validation
    subword_dropout   BPE-dropout: each training epoch segments the text afresh, skipping merges
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping, Optional

from aiayn.config import check
from aiayn.data.tokenizer import DEFAULT_VOCAB_SIZE
from aiayn.runtime import stable_hash



def check_positive(settings, *names: str) -> None:
    for name in names:
        check(getattr(settings, name) > 0, f"data.{name} must be positive, got {getattr(settings, name)}")


@dataclass(frozen=True)
class DataSettings:
    """What every task reads: where the data is and how much goes into a micro-batch. `renamed`
    lists keys of earlier releases (old -> new, None: no longer used), which a config still loads with."""

    renamed: ClassVar[Mapping[str, Optional[str]]] = MappingProxyType({})
    corpus: str = ""
    max_tokens: int = 4096  # per micro-batch: padded tokens (a seq2seq pair counts src + tgt_in)

    def __post_init__(self) -> None:
        check_positive(self, "max_tokens")


@dataclass(frozen=True)
class SplitSettings(DataSettings):
    """Data in named splits."""

    train_split: str = "train"
    valid_split: str = "val"
    test_split: str = ""  # "" = none


@dataclass(frozen=True)
class VocabSettings(DataSettings):
    """Text turned into ids by a vocabulary trained on the training text (or given)."""

    vocab_types: ClassVar[tuple[str, ...]] = ("bpe", "unigram", "symbols")  # what the task's tokenizer builder makes
    tokenizer: str = ""  # a directory holding tokenizer.json (e.g. from `aiayn prepare --out`); "" = train one
    vocab_type: str = "bpe"  # "bpe" | "unigram" (sentencepiece) | "symbols" (whitespace) | "chars" (the lm task's)
    vocab_size: int = DEFAULT_VOCAB_SIZE  # sentencepiece only; "symbols" and "chars" take what the data holds

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.vocab_type in self.vocab_types,
              f"data.vocab_type must be one of {', '.join(self.vocab_types)} for this task, got {self.vocab_type!r}")
        check_positive(self, "vocab_size")


@dataclass(frozen=True)
class TextPairSettings(VocabSettings, SplitSettings):
    """A source text and a target text per example (the tasks of `seq2seq`)."""

    renamed: ClassVar[Mapping[str, Optional[str]]] = MappingProxyType({"max_source_length": "max_input_tokens"})
    joint_vocab: bool = True  # one vocabulary for both sides (§3.4)
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    batching: str = "bucket"  # "bucket": length-sorted token buckets (aiayn.data); "random": mixed lengths
    max_length: int = 256  # training pairs with a longer side (in tokens) are dropped, and counted
    max_input_tokens: int = 0  # > 0: longer sources are cut to this many tokens (counted), never dropped
    valid_max_sentences: int = 0  # validation metrics on N sentences (the loss on all); 0 = all
    subword_dropout: float = 0.0  # > 0: BPE-dropout, each merge skipped with this probability in training

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.batching in ("bucket", "random"), f"data.batching must be 'bucket' or 'random', got {self.batching!r}")
        check_positive(self, "max_length")
        check(self.max_input_tokens >= 0, "data.max_input_tokens must be >= 0")
        check(self.valid_max_sentences >= 0, "data.valid_max_sentences must be >= 0")
        check_fraction("subword_dropout", self.subword_dropout)
        check(not self.subword_dropout or self.vocab_type == "bpe",
              f"data.subword_dropout needs vocab_type = 'bpe' (BPE-dropout), got {self.vocab_type!r}")


def check_fraction(name: str, value: float) -> None:
    check(math.isfinite(value) and 0.0 <= value < 1.0, f"data.{name} must be in [0, 1), got {value}")


def check_carve(data) -> None:
    """`data.carve_fraction` is a share, and a carve has a split to hold out into (`data.valid_split`)."""
    check_fraction("carve_fraction", data.carve_fraction)
    check(not data.carve_fraction or bool(data.valid_split),
          f"data.carve_fraction = {data.carve_fraction} needs data.valid_split: the name of the split it holds out")


def carving(data, split: str) -> bool:
    """Whether `split` is read from the training files under a carve (`data.carve_fraction` > 0): the
    training split and the validation split carved from it; any other split is read whole."""
    return data.carve_fraction > 0 and split in (data.train_split, data.valid_split)


def carved(key: str, fraction: float, offset: float = 0.0) -> bool:
    """Whether the example named `key` belongs to a validation split carved from the training
    data: a hash, not a random draw, so the split is the same in every run and on every machine.
    The carve is the keys whose hash falls in [offset, offset + fraction) of its range: another
    offset carves a disjoint split (for a figure no setting was chosen on)."""
    return offset <= stable_hash(key) / 2**64 < offset + fraction
