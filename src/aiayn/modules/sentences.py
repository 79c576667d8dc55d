"""Sentences as the encoder's units: each sentence of a source becomes one vector.

End-to-end memory networks read a bAbI story as a list of facts, each fact the sum of its word
embeddings weighted by their place in it ("position encoding", Sukhbaatar et al., 2015, §4.1):

    m_i = Σ_j l_j ⊙ A x_ij,    l_kj = (1 - j/J) - (k/d)(1 - 2j/J)

for word j = 1 .. J of the sentence and dimension k = 1 .. d. The Universal Transformer reads bAbI
the same way (Dehghani et al., 2019, §3.1: "we encode each fact as a vector"), so that its layers
attend over facts and the question rather than over words. Here a sentence ends at any token of
`ends` (e.g. "." and "?"); the tokens after the last end (EOS) form a sentence of their own.
Position encodings then run over sentences (`Encoder`), not words.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def sentence_index(src: Tensor, ends: Tensor, real: Tensor) -> Tensor:
    """(B, S) ids -> (B, S) the sentence of each token (0, 1, ...): a sentence ends at an id of `ends`;
    padding (`real` False) gets 0."""
    is_end = torch.isin(src, ends).long()
    return (torch.cumsum(is_end, 1) - is_end).masked_fill(~real, 0)


class SentencePooling(nn.Module):
    """(B, S, D) token embeddings -> (B, N, D) sentence vectors and their (B, N) mask; no weights."""

    def __init__(self, ends: tuple[int, ...]):
        super().__init__()
        if not ends:
            raise ValueError("source_units = 'sentences' needs sentence_ends, the ids of the tokens that end a "
                             "sentence (the qa task sets them from its vocabulary)")
        self.register_buffer("ends", torch.tensor(sorted(ends), device="cpu"), persistent=False)  # also on meta

    def forward(self, x: Tensor, src: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """x: (B, S, D) embedded ids `src` (B, S); real: (B, S) bool, True at non-pad tokens."""
        sentence = sentence_index(src, self.ends, real)  # (B, S)
        n = int(sentence.max()) + 1 if x.shape[1] else 1
        member = (sentence[:, None, :] == torch.arange(n, device=src.device)[None, :, None]) & real[:, None, :]  # (B, N, S)
        length = member.sum(-1)  # (B, N): J of each sentence
        j = (member.cumsum(-1) * member).sum(1).to(x.dtype)  # (B, S): 1-based place of each token in its sentence
        big_j = length.gather(1, sentence).clamp(min=1).to(x.dtype)  # (B, S): its sentence's J
        k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype) / x.shape[-1]  # (D,)
        weight = (1 - j / big_j)[..., None] - k * (1 - 2 * j / big_j)[..., None]  # (B, S, D): l_kj
        pooled = member.to(x.dtype) @ (x * weight * real[..., None])  # (B, N, D)
        return pooled, length > 0
