"""Hugging Face tokenizers as aiayn `Tokenizer`s, their ids renamed by an `IdMap` (`interop.vocab`).

    HFTokenizer      a `tokenizers` library tokenizer.json: GPT-2's byte-level BPE, BERT's WordPiece
    MarianTokenizer  one side of a Marian model: its sentencepiece model (source.spm or target.spm)
                     and its vocab.json (piece -> id), as `transformers.MarianTokenizer` reads them

Each is one file in the model directory (`tokenizer.json`, aiayn's manifest, names it): a JSON
object holding the Hugging Face files and the id map, so the directory needs nothing else.

`encode` gives what the Hugging Face tokenizer gives with its special tokens, renamed, less a
leading BOS (BERT's [CLS]: the encoder-only model puts it first itself); so BERT's texts end with
[SEP] (aiayn's EOS) as they do in Hugging Face. `decode` drops PAD, BOS and EOS, then decodes as
Hugging Face does with `skip_special_tokens=True`. `hf_ids` turns aiayn ids back into Hugging
Face's. The four aiayn special ids are shown by their aiayn pieces (`<pad>`, `<s>`, `</s>`,
`<unk>`), so that tools reading pieces (CTranslate2's vocabulary) find them.
"""

from __future__ import annotations

import base64
import json
from typing import Sequence

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data.tokenizer import SPECIAL_PIECES, Tokenizer, TokenizerError
from aiayn.interop.vocab import IdMap, N_SPECIALS

_DROPPED = (PAD_ID, BOS_ID, EOS_ID)


def backend_of(tokenizer_json: str, source: str):
    """A `tokenizers.Tokenizer` from the text of a tokenizer.json, with the truncation and padding saved in
    it turned off, as transformers' fast tokenizers encode by default: aiayn cuts inputs itself and counts
    what it cuts. A bad file is an error naming `source`."""
    from tokenizers import Tokenizer as Backend

    try:
        backend = Backend.from_str(tokenizer_json)
    except Exception as e:  # tokenizers raises its own exception type for bad files
        raise TokenizerError(f"{source}: not a Hugging Face tokenizer.json ({e})") from None
    backend.no_truncation()
    backend.no_padding()
    return backend


def _read_json(data: bytes, source: str, keys: Sequence[str]) -> dict:
    try:
        obj = json.loads(data.decode("utf-8"))
        for key in keys:
            obj[key]
        return obj
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise TokenizerError(f"{source}: not an aiayn wrapper of a Hugging Face tokenizer ({e})") from None


class _Mapped(Tokenizer):
    """What both adapters share: the id map, the vocabulary size, pieces and the checks."""

    ids: IdMap

    @property
    def vocab_size(self) -> int:
        return self.ids.size

    def hf_ids(self, ids: Sequence[int]) -> list[int]:
        """The Hugging Face ids of aiayn ids."""
        return self.ids.to_hf(ids)

    def _mapped(self, hf_ids: Sequence[int]) -> list[int]:
        ids = self.ids.to_aiayn(hf_ids)
        return ids[1:] if ids and ids[0] == BOS_ID else ids

    def _kept_hf(self, ids: Sequence[int]) -> list[int]:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        return self.ids.to_hf([i for i in ids if i not in _DROPPED])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        ids = [int(i) for i in ids]
        self._check_ids(ids)
        inverse = self.ids.inverse
        return [SPECIAL_PIECES[i] if i < N_SPECIALS else self._piece(inverse[i]) for i in ids]

    def _piece(self, hf_id: int) -> str:
        raise NotImplementedError


class HFTokenizer(_Mapped):
    """A `tokenizers.Tokenizer` (tokenizer.json) with an id map."""

    kind = "hf-tokenizers"
    suffix = ".hf.json"

    def __init__(self, tokenizer_json: str, ids: IdMap, source: str = "<tokenizer.json>"):
        self.backend = backend_of(tokenizer_json, source)
        if self.backend.get_vocab_size(with_added_tokens=True) > ids.hf_size:
            raise TokenizerError(f"{source}: the tokenizer has {self.backend.get_vocab_size()} ids, the model "
                                 f"{ids.hf_size}")
        self.json, self.ids = tokenizer_json, ids

    @classmethod
    def of(cls, tokenizers, where: str, family: str) -> "HFTokenizer":
        """The model directory's tokenizer (a `TokenizerPair` or None), which must be one of these to
        export as `family`'s; else an error naming its type."""
        tokenizer = tokenizers.src if tokenizers is not None else None
        if not isinstance(tokenizer, cls):
            raise ValueError(f"{where}: a {getattr(tokenizer, 'kind', 'no')} tokenizer has no {family} counterpart "
                             "(a tokenizer imported from Hugging Face has)")
        return tokenizer

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "HFTokenizer":
        obj = _read_json(data, source, ("tokenizer", "ids"))
        return cls(json.dumps(obj["tokenizer"], ensure_ascii=False), IdMap.from_dict(obj["ids"]), source)

    def serialize(self) -> bytes:
        obj = {"tokenizer": json.loads(self.json), "ids": self.ids.to_dict()}
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")

    def encode(self, text: str) -> list[int]:
        return self._mapped(self.backend.encode(text).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._mapped(e.ids) for e in self.backend.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(self._kept_hf(ids), skip_special_tokens=True)

    def _piece(self, hf_id: int) -> str:
        return self.backend.id_to_token(hf_id)


class MarianTokenizer(_Mapped):
    """One side of a Marian model: its sentencepiece model splits a text into pieces, its vocab.json
    gives each piece its id (a piece not in it is unk), as `transformers.MarianTokenizer` does. A
    text may start with a target-language code such as `>>fra<<` (multilingual models), a token of
    its own. Sacremoses' punctuation normalisation, which transformers applies when sacremoses is
    installed, is not applied."""

    kind = "marian"
    suffix = ".marian.json"

    def __init__(self, spm: bytes, vocab: dict[str, int], ids: IdMap, unk: str = "<unk>",
                 source: str = "<marian>"):
        import sentencepiece

        try:
            self.sp = sentencepiece.SentencePieceProcessor(model_proto=spm)
        except Exception as e:  # sentencepiece raises RuntimeError / OSError on bad protos
            raise TokenizerError(f"{source}: not a valid sentencepiece model ({e})") from None
        if unk not in vocab:
            raise TokenizerError(f"{source}: the vocabulary has no {unk!r}")
        if max(vocab.values()) >= ids.hf_size:
            raise TokenizerError(f"{source}: vocabulary ids reach {max(vocab.values())}, the model has {ids.hf_size}")
        self.spm, self.vocab, self.ids, self.unk = bytes(spm), dict(vocab), ids, unk
        self.token_of = {i: p for p, i in self.vocab.items()}
        self.special_hf = set(ids.specials)  # eos, unk, pad: dropped by decode, as skip_special_tokens does

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> "MarianTokenizer":
        obj = _read_json(data, source, ("spm", "vocab", "ids"))
        return cls(base64.b64decode(obj["spm"]), obj["vocab"], IdMap.from_dict(obj["ids"]),
                   obj.get("unk", "<unk>"), source)

    def serialize(self) -> bytes:
        obj = {"spm": base64.b64encode(self.spm).decode("ascii"), "vocab": self.vocab, "ids": self.ids.to_dict(),
               "unk": self.unk}
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")

    def tokens(self, text: str) -> list[str]:
        """The pieces of `text`, a leading language code >>xx<< kept whole (MarianTokenizer._tokenize)."""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2:]
        return code + self.sp.encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        unk = self.vocab[self.unk]
        return self._mapped([self.vocab.get(p, unk) for p in self.tokens(text)])

    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self.token_of.get(h, self.unk) for h in self._kept_hf(ids) if h not in self.special_hf]
        return self.sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def _piece(self, hf_id: int) -> str:
        return self.token_of.get(hf_id, self.unk)
