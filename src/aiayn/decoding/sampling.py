"""Ancestral sampling with temperature, top-k and top-p (nucleus) filtering.

Seeded through an explicit `torch.Generator`, so a run is reproducible; or through one
generator per row, so that a row's sample does not depend on the rest of its batch.
Filtered-out tokens get probability exactly 0 and are therefore never drawn.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from aiayn.config import SamplingConfig
from aiayn.decoding.greedy import decode_rows
from aiayn.decoding.interface import Decodable


def filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Set to -inf every logit outside the top-k and outside the top-p nucleus. (N, V) -> (N, V).

    top_k = 0 keeps all; top_p = 1 keeps all. The nucleus is the smallest set of most
    probable tokens whose probability reaches top_p (the most probable token is always kept).
    """
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1, got top_k={top_k}, top_p={top_p}")
    logits = logits.clone()
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits[logits < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of strictly more probable tokens
        drop_sorted = before >= top_p
        logits.scatter_(-1, order, sorted_logits.masked_fill(drop_sorted, float("-inf")))
    return logits


def sampling_probs(scores: Tensor, config: SamplingConfig) -> Tensor:
    """softmax(scores / temperature) over the tokens `filter_logits` keeps: (N, V) -> (N, V) float32.
    The best score is moved to 0 first and stays there, so a temperature near 0 (1e-300, below float32's
    range) gives greedy search's one-hot, the limit, rather than 0/0."""
    scores = scores.float()
    shifted = scores - scores.amax(-1, keepdim=True)  # (N, V), the best at 0
    scaled = torch.where(shifted < 0, shifted / config.temperature, 0.0)
    return filter_logits(scaled, config.top_k, config.top_p).softmax(-1)


def sample(model: Decodable, src: Tensor, config: SamplingConfig | None = None,
           generator: torch.Generator | None = None, max_len_a: float | None = None,
           max_len_b: int | None = None, min_len: int = 0,
           generators: Sequence[torch.Generator] | None = None, no_repeat_ngram_size: int = 0) -> list[list[int]]:
    """Sample one output per row of src (B, S); ids without BOS/EOS.

    Probabilities are softmax(logits / temperature) restricted by `filter_logits`; `config`
    defaults to `SamplingConfig()`. `generator` overrides the one seeded from `config.seed`
    and draws for the whole batch at once, so a row's sample depends on its batch.
    `generators`, B of them on src's device, override both: row b draws only from
    generators[b], one token per step, so its sample is the one it gets alone. This draws row
    by row and costs a host sync per step; `generator` keeps the batched draw.
    """
    cfg = config or SamplingConfig()
    if generators is not None:
        if generator is not None or len(generators) != src.shape[0]:
            raise ValueError(f"generators needs one generator per row ({src.shape[0]}) and no generator")
    elif generator is None and cfg.seed is not None:
        generator = torch.Generator(device=src.device).manual_seed(cfg.seed)

    def pick(scores: Tensor, rows: Tensor) -> Tensor:  # (N, V), (N,) -> (N,)
        probs = sampling_probs(scores, cfg)  # (N, V)
        if generators is None:
            return torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return torch.cat([torch.multinomial(p, 1, generator=generators[r]) for p, r in zip(probs, rows.tolist())])

    return decode_rows(model, src, pick, max_len_a, max_len_b, min_len, no_repeat_ngram_size)
