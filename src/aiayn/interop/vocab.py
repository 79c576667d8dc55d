"""Token ids between Hugging Face checkpoints and aiayn, whose special ids are fixed
(`aiayn.config`: PAD 0, BOS 1, EOS 2, UNK 3, the same in every model).

An `IdMap` says which aiayn id each Hugging Face id becomes: the few special ids go to their
aiayn ids, every other id keeps its order from aiayn id 4 on. Rows of a vocabulary matrix (an
embedding, an output projection, a logits bias) move with their ids, so the model computes the
same function with renamed tokens:

    Marian   eos → EOS, unk → UNK, pad → BOS (Marian starts decoding from its pad token, so the
             decoder's first input is the pad embedding, which aiayn feeds as BOS)
    GPT-2    <|endoftext|> → EOS (it ends a text; a prompt never needs BOS)
    BERT     [PAD] → PAD, [CLS] → BOS (the encoder-only model puts BOS first as [CLS]),
             [SEP] → EOS, [UNK] → UNK: a permutation

An aiayn special id that no Hugging Face id maps to (Marian's PAD; GPT-2's PAD, BOS and UNK) is
*absent*: its rows are zeros and its logit gets the bias `ABSENT_LOGIT`, so it takes no
probability mass and the model's log-probabilities over the other ids are Hugging Face's. The
model's vocabulary is then larger than the checkpoint's (Marian: V + 1, GPT-2: V + 3).

Export takes the rows back by the same map (`rows_out`), dropping absent ids, so
import → export gives the original tensors. An aiayn-trained model exports with the map of a
fresh Hugging Face vocabulary in the family's layout (`IdMap.build`): e.g. Marian's eos 0, unk 1,
the pieces, then pad, whose embedding is aiayn's BOS row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

N_SPECIALS = 4  # aiayn ids 0..3
ABSENT_LOGIT = -1e4  # exp(-1e4) is 0 in fp32, bf16 and fp16; finite, so a loss over it stays finite


@dataclass(frozen=True)
class IdMap:
    """aiayn_of[h]: the aiayn id of Hugging Face id h (all distinct); `size`: aiayn's vocabulary."""

    aiayn_of: tuple[int, ...]
    size: int

    @classmethod
    def build(cls, hf_size: int, specials: Mapping[int, int]) -> "IdMap":
        """`specials`: Hugging Face id -> aiayn special id (PAD, BOS, EOS or UNK); the other ids keep
        their order from aiayn id 4 on."""
        if not set(specials.values()) <= {PAD_ID, BOS_ID, EOS_ID, UNK_ID} or len(set(specials.values())) != len(specials):
            raise ValueError(f"special ids must map to distinct aiayn special ids, got {dict(specials)}")
        out, next_id = [], N_SPECIALS
        for h in range(hf_size):
            if h in specials:
                out.append(specials[h])
            else:
                out.append(next_id)
                next_id += 1
        return cls(tuple(out), next_id)

    @property
    def hf_size(self) -> int:
        return len(self.aiayn_of)

    @property
    def specials(self) -> dict[int, int]:
        return {h: a for h, a in enumerate(self.aiayn_of) if a < N_SPECIALS}

    @property
    def absent(self) -> list[int]:
        """aiayn special ids no Hugging Face id maps to."""
        return sorted(set(range(N_SPECIALS)) - set(self.specials.values()))

    def _index(self, device) -> Tensor:
        return torch.tensor(self.aiayn_of, dtype=torch.long, device=device)

    def rows_in(self, hf_rows: Tensor) -> Tensor:
        """(V_hf, ...) rows by Hugging Face id -> (size, ...) by aiayn id; absent ids get zeros."""
        out = hf_rows.new_zeros((self.size, *hf_rows.shape[1:]))
        out[self._index(hf_rows.device)] = hf_rows
        return out

    def bias_in(self, hf_bias: Optional[Tensor], like: Tensor) -> Tensor:
        """A logits bias (size,): Hugging Face's (V_hf,) by aiayn id (zeros when None), `ABSENT_LOGIT`
        at absent ids. `like`: a tensor whose dtype and device the result takes."""
        out = torch.full((self.size,), ABSENT_LOGIT, dtype=like.dtype, device=like.device)
        out[self._index(like.device)] = 0.0 if hf_bias is None else hf_bias.to(like.dtype)
        return out

    def rows_out(self, rows: Tensor) -> Tensor:
        """(size, ...) by aiayn id -> (V_hf, ...) by Hugging Face id (absent ids dropped)."""
        return rows[self._index(rows.device)]

    def to_aiayn(self, hf_ids: Sequence[int]) -> list[int]:
        return [self.aiayn_of[h] for h in hf_ids]

    def to_hf(self, ids: Sequence[int]) -> list[int]:
        """Hugging Face ids of aiayn ids; absent ids have none (an error)."""
        inverse = self.inverse
        try:
            return [inverse[int(i)] for i in ids]
        except KeyError as e:
            raise ValueError(f"aiayn id {e.args[0]} has no Hugging Face id") from None

    @functools.cached_property  # a frozen dataclass without slots: cached in the instance's __dict__
    def inverse(self) -> dict[int, int]:
        return {a: h for h, a in enumerate(self.aiayn_of)}

    def to_dict(self) -> dict:
        """Compact: the size and the special ids (the rest follows from the order rule)."""
        return {"hf_size": self.hf_size, "specials": {str(h): a for h, a in self.specials.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "IdMap":
        return cls.build(int(data["hf_size"]), {int(h): int(a) for h, a in data["specials"].items()})
