"""Tokenizers: text <-> token ids, with the special ids fixed for every vocabulary.

Special ids (from `aiayn.config`, identical in every tokenizer this module builds):

    PAD_ID = 0  "<pad>"  padding; never produced by `encode`
    BOS_ID = 1  "<s>"    prepended to the decoder input by `batching.collate`
    EOS_ID = 2  "</s>"   appended to the decoder target by `batching.collate`
    UNK_ID = 3  "<unk>"  a symbol outside the vocabulary

`encode` never adds BOS/EOS; `decode` drops PAD/BOS/EOS. Subword vocabularies are
sentencepiece models (BPE or unigram, §5.1 of the paper uses BPE with a shared
source-target vocabulary). They are trained with identity normalization, no whitespace
collapsing and byte fallback, so `decode(encode(text)) == text` for any string without U+2581
("▁", sentencepiece's own word boundary, which decodes as a space; no corpus here has one).

A model directory holds `tokenizer.json` (a manifest: type, joint, file names) and the
tokenizer files beside the lead's `config.json` + `model.safetensors`, so it is
self-contained; see `save_tokenizers` / `load_tokenizers`.
"""

from __future__ import annotations

import abc
import hashlib
import io
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Iterable, Iterator, Mapping, Optional, Sequence

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.corpus import read_lines
from aiayn.io import atomic_write

log = logging.getLogger(__name__)

SPECIAL_PIECES = MappingProxyType({PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"})
N_SPECIALS = len(SPECIAL_PIECES)
MANIFEST = "tokenizer.json"
MANIFEST_VERSION = 1
# Default subword vocabulary: joint BPE of this size (a small-corpus choice; the paper used
# 37000 joint BPE pieces for WMT En-De, §5.1).
DEFAULT_VOCAB_SIZE = 8000
TOKENIZER_DIR = "tokenizer"  # in a run directory: the vocabulary the run trains with


class TokenizerError(ValueError):
    """A tokenizer file is corrupt or inconsistent; the message names the file."""


class Tokenizer(abc.ABC):
    """Abstract tokenizer. Subclasses set `kind` and `suffix` and implement the rest."""

    kind: ClassVar[str]  # manifest "type"
    suffix: ClassVar[str]  # file name suffix of `save`

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included; ids are 0 .. vocab_size - 1."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; no BOS/EOS added."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, skipping PAD/BOS/EOS."""

    @abc.abstractmethod
    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The subword string of every id (specials included), e.g. for attention plot labels."""

    @abc.abstractmethod
    def serialize(self) -> bytes:
        """The exact bytes `save` writes; `from_bytes(serialize())` rebuilds the tokenizer."""

    @classmethod
    @abc.abstractmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "Tokenizer":
        """Rebuild from `serialize()` output; `source` names the file in error messages."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_dropout(self, texts: Sequence[str], p: float, seed: int) -> list[list[int]]:
        """Token ids of `texts` with BPE-dropout `p` (Provilkov et al., 2020): a sentencepiece BPE
        vocabulary only."""
        raise ValueError(f"data.subword_dropout needs a sentencepiece BPE vocabulary, not a {self.kind!r} one")

    def fingerprint(self) -> str:
        """A stable hash of the vocabulary, used to key preprocessing caches."""
        return hashlib.sha256(self.kind.encode() + b"\0" + self.serialize()).hexdigest()

    def save(self, directory: str | Path, prefix: str = "tokenizer") -> str:
        """Write `{directory}/{prefix}{suffix}` atomically; return the file name."""
        name = f"{prefix}{self.suffix}"
        with atomic_write(Path(directory) / name) as tmp:
            tmp.write_bytes(self.serialize())
        return name

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        return cls.from_bytes(path.read_bytes(), source=str(path))

    def _check_ids(self, ids: Sequence[int]) -> None:
        for i in ids:
            if not 0 <= int(i) < self.vocab_size:
                raise ValueError(f"token id {i} outside the vocabulary [0, {self.vocab_size})")


# Threads sentencepiece trains with: a fixed count, not the machine's cores, since its unigram trainer
# gives other pieces with another count and the count is saved in the model (and so in its fingerprint):
# the same text and seed give the same vocabulary on every machine.
TRAIN_THREADS = 8


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece BPE/unigram model with PAD/BOS/EOS/UNK at ids 0/1/2/3."""

    kind = "sentencepiece"
    suffix = ".model"

    def __init__(self, model_proto: bytes, source: str = "<bytes>") -> None:
        import sentencepiece as spm

        self._proto = bytes(model_proto)
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        except Exception as e:  # sentencepiece raises RuntimeError / OSError on bad protos
            raise TokenizerError(f"{source}: not a valid sentencepiece model ({e})") from None
        found = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
        if found != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise TokenizerError(f"{source}: special ids (pad, bos, eos, unk) are {found}; "
                                 f"aiayn needs {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}")

    @classmethod
    def train(
        cls,
        texts: Optional[Iterable[str]] = None,
        files: Optional[Sequence[str | Path]] = None,
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        model_type: str = "bpe",
        character_coverage: float = 1.0,
        byte_fallback: bool = True,
        input_sentence_size: int = 2_000_000,
        num_threads: int = TRAIN_THREADS,
        seed: int = 0,
        user_symbols: Sequence[str] = (),
    ) -> "SentencePieceTokenizer":
        """Train in-process on `texts` (one sentence each) and/or UTF-8 text `files` (read as the corpus
        readers read them: `.gz` decompressed, a BOM dropped, errors naming the file and line).

        Identity normalization and `remove_extra_whitespaces=False` keep text exactly as
        given; byte fallback spells any character outside the vocabulary as UTF-8 bytes,
        so nothing becomes <unk> and detokenization round-trips. `user_symbols` (e.g. "[SEP]")
        are pieces of their own, never split or merged. At most
        `input_sentence_size` sentences (a seeded sample) are used, which bounds time.
        """
        import sentencepiece as spm

        if model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
        if texts is None and not files:
            raise ValueError("train needs texts or files")
        spm.set_random_generator_seed(seed)
        proto = io.BytesIO()
        options = dict(
            model_writer=proto, vocab_size=vocab_size, model_type=model_type,
            pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
            pad_piece=SPECIAL_PIECES[PAD_ID], bos_piece=SPECIAL_PIECES[BOS_ID],
            eos_piece=SPECIAL_PIECES[EOS_ID], unk_piece=SPECIAL_PIECES[UNK_ID],
            byte_fallback=byte_fallback, character_coverage=character_coverage,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            num_threads=num_threads, minloglevel=2,
            user_defined_symbols=list(user_symbols),
        )
        too_long = [0]
        try:  # an iterator, not a temp file: the model proto would record the temp file name
            spm.SentencePieceTrainer.train(sentence_iterator=_sentences(texts, files, too_long), **options)
        except RuntimeError as e:
            raise ValueError(f"sentencepiece training failed: {e}") from None
        if too_long[0]:  # kept as they were: a vocabulary a recipe's figures were measured with stays the same
            log.warning("%d training lines over %d bytes (sentencepiece's max_sentence_length) did not train the "
                        "vocabulary; they still encode, by pieces and bytes", too_long[0], SPM_MAX_SENTENCE_BYTES)
        tok = cls(proto.getvalue())
        log.info("trained %s sentencepiece vocabulary of %d pieces", model_type, tok.vocab_size)
        return tok

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "SentencePieceTokenizer":
        return cls(data, source=source)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts), num_threads=os.cpu_count() or 1)

    def encode_dropout(self, texts: Sequence[str], p: float, seed: int) -> list[list[int]]:
        """One segmentation of each text in which every BPE merge is skipped with probability `p`
        (BPE-dropout, Provilkov et al., 2020); the same for the same `seed` (any int: sentencepiece
        takes its low 32 bits). sentencepiece draws from a generator seeded process-wide, which one
        thread then reads in order, so it encodes on one thread (its worker threads would each start
        their own)."""
        import sentencepiece as spm

        spm.set_random_generator_seed(seed % 2**32)
        return self._sp.encode(list(texts), enable_sampling=True, alpha=p, nbest_size=-1, num_threads=1)

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        return self._sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        return [self._sp.id_to_piece(i) for i in ids]

    def serialize(self) -> bytes:
        return self._proto


class SymbolTokenizer(Tokenizer):
    """A fixed vocabulary of whitespace-separated symbols (synthetic tasks); ids 4.. in order.

    Unknown symbols encode to UNK_ID and decode to "<unk>". Decoding joins with one space,
    so it round-trips only text in canonical form (single spaces, no edge whitespace).
    """

    kind = "symbols"
    suffix = ".symbols.json"

    def __init__(self, symbols: Sequence[str], source: str = "<symbols>") -> None:
        symbols = list(symbols)
        for s in symbols:
            self._check_symbol(s, source)
        if len(set(symbols)) != len(symbols):
            raise TokenizerError(f"{source}: duplicate symbols")
        self.symbols = symbols
        self._ids = {s: i + N_SPECIALS for i, s in enumerate(symbols)}

    @staticmethod
    def _check_symbol(s, source: str) -> None:
        if not isinstance(s, str) or not s or s != "".join(s.split()):
            raise TokenizerError(f"{source}: symbol {s!r} is empty or contains whitespace")
        if s in SPECIAL_PIECES.values():
            raise TokenizerError(f"{source}: symbol {s!r} clashes with a special token")

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "SymbolTokenizer":
        try:
            obj = json.loads(data.decode("utf-8"))
            symbols = obj["symbols"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise TokenizerError(f"{source}: not a symbol vocabulary ({e})") from None
        if not isinstance(symbols, list):  # a string would be taken as its characters
            raise TokenizerError(f"{source}: not a symbol vocabulary (symbols is {type(symbols).__name__}, not a list)")
        return cls(symbols, source=source)

    @property
    def vocab_size(self) -> int:
        return N_SPECIALS + len(self.symbols)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(s, UNK_ID) for s in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(p for i, p in zip(ids, self.pieces(ids)) if int(i) not in (PAD_ID, BOS_ID, EOS_ID))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        return [SPECIAL_PIECES[i] if i < N_SPECIALS else self.symbols[i - N_SPECIALS] for i in ids]

    def serialize(self) -> bytes:
        return json.dumps({"symbols": self.symbols}, ensure_ascii=False).encode("utf-8")


class CharTokenizer(SymbolTokenizer):
    """One id per character (a character-level language model, as nanoGPT's shakespeare_char).
    Unknown characters encode to UNK_ID; decoding joins with nothing, so text round-trips."""

    kind = "chars"
    suffix = ".chars.json"

    @staticmethod
    def _check_symbol(c, source: str) -> None:
        if not isinstance(c, str) or len(c) != 1:
            raise TokenizerError(f"{source}: every symbol must be one character, got {c!r}")

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(c, UNK_ID) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(p for i, p in zip(ids, self.pieces(ids)) if int(i) not in (PAD_ID, BOS_ID, EOS_ID))


TOKENIZER_TYPES: Mapping[str, type[Tokenizer]] = MappingProxyType({
    SentencePieceTokenizer.kind: SentencePieceTokenizer,
    SymbolTokenizer.kind: SymbolTokenizer,
    CharTokenizer.kind: CharTokenizer,
})
# Wrappers of Hugging Face tokenizers (`aiayn import hf`), imported when a manifest names them.
IMPORTED_TOKENIZER_TYPES: Mapping[str, str] = MappingProxyType({
    "hf-tokenizers": "aiayn.interop.tokenizers:HFTokenizer",
    "marian": "aiayn.interop.tokenizers:MarianTokenizer",
})


@dataclass(frozen=True)
class TokenizerPair:
    """Source and target tokenizers. A joint vocabulary (§3.4) is the same object twice."""

    src: Tokenizer
    tgt: Tokenizer

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @classmethod
    def shared(cls, tokenizer: Tokenizer) -> "TokenizerPair":
        return cls(tokenizer, tokenizer)


def train_tokenizers(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model_type: str = "bpe",
    joint: bool = True,
    **options,
) -> TokenizerPair:
    """Sentencepiece vocabularies from training text: one joint model on both sides
    (the default, as the paper shares source and target vocabularies, §5.1 / §3.4) or one
    per side. `options` go to `SentencePieceTokenizer.train`. Pass the training split only.
    """
    if joint:
        return TokenizerPair.shared(SentencePieceTokenizer.train(
            itertools.chain(src_texts, tgt_texts), vocab_size=vocab_size, model_type=model_type, **options))
    return TokenizerPair(
        SentencePieceTokenizer.train(src_texts, vocab_size=vocab_size, model_type=model_type, **options),
        SentencePieceTokenizer.train(tgt_texts, vocab_size=vocab_size, model_type=model_type, **options),
    )


def save_tokenizers(pair: TokenizerPair, model_dir: str | Path) -> Path:
    """Write the tokenizer file(s) and then `tokenizer.json` into `model_dir`, each atomically.

    The manifest is written last, so a directory whose manifest exists has its files.
    Returns the manifest path.
    """
    model_dir = Path(model_dir)
    if pair.joint:
        files = {"src": pair.src.save(model_dir, "tokenizer")}
        files["tgt"] = files["src"]
    else:
        files = {side: getattr(pair, side).save(model_dir, f"tokenizer.{side}") for side in ("src", "tgt")}
    manifest = {
        "version": MANIFEST_VERSION, "joint": pair.joint,
        "src": {"type": pair.src.kind, "file": files["src"]},
        "tgt": {"type": pair.tgt.kind, "file": files["tgt"]},
        "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
    }
    path = model_dir / MANIFEST
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def load_tokenizers(model_dir: str | Path) -> TokenizerPair:
    """Read what `save_tokenizers` wrote. Errors name the missing or corrupt file."""
    model_dir = Path(model_dir)
    path = model_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer manifest {path} (a model directory needs {MANIFEST})")
    manifest = _read_manifest(path)
    src = _load_side(model_dir, manifest["src"], path)
    tgt = src if manifest["joint"] else _load_side(model_dir, manifest["tgt"], path)
    return TokenizerPair(src, tgt)


def _read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        for side in ("src", "tgt"):
            if not all(isinstance(manifest[side].get(k), str) for k in ("type", "file")):
                raise KeyError(f"{side}.type / {side}.file")
        manifest["joint"] = bool(manifest["joint"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise TokenizerError(f"{path}: corrupt tokenizer manifest ({type(e).__name__}: {e})") from None
    if manifest.get("version") != MANIFEST_VERSION:
        raise TokenizerError(f"{path}: unsupported manifest version {manifest.get('version')!r}")
    return manifest


def _load_side(model_dir: Path, entry: dict, manifest_path: Path) -> Tokenizer:
    kind = entry["type"]
    if kind not in TOKENIZER_TYPES and kind not in IMPORTED_TOKENIZER_TYPES:
        raise TokenizerError(f"{manifest_path}: unknown tokenizer type {kind!r}")
    name = Path(entry["file"])
    if name.is_absolute() or ".." in name.parts:
        raise TokenizerError(f"{manifest_path}: tokenizer file {name} must lie inside the model directory")
    return _tokenizer_class(kind).from_file(model_dir / name)


def _tokenizer_class(kind: str) -> type[Tokenizer]:
    if kind in TOKENIZER_TYPES:
        return TOKENIZER_TYPES[kind]
    import importlib

    module, _, name = IMPORTED_TOKENIZER_TYPES[kind].partition(":")
    return getattr(importlib.import_module(module), name)


SPM_MAX_SENTENCE_BYTES = 4192  # sentencepiece's max_sentence_length: it skips a longer sentence, and says nothing


def _sentences(texts: Optional[Iterable[str]], files: Optional[Sequence[str | Path]], too_long: list[int]) -> Iterator[str]:
    """The training text, line by line; `too_long[0]` counts the lines sentencepiece will skip."""
    lines = itertools.chain((line for f in files or [] for line in read_lines(f, strip=False)),
                            (t.replace("\n", " ") for t in texts or []))
    for line in lines:
        too_long[0] += len(line.encode("utf-8")) > SPM_MAX_SENTENCE_BYTES
        yield line
