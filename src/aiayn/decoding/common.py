"""Helpers shared by every search strategy and by the callers that prepare their input.

Source convention (the trainer and the Translator both follow it): a source sentence is
its token ids followed by EOS, no BOS, padded on the right with PAD. See `encode_source`.

Output-length convention: a sentence of |src| real source tokens (EOS included) may
receive at most ``max(1, floor(a·|src| + b))`` target tokens, EOS included (§6.1:
a = 1, b = 50). A hypothesis that reaches the limit without EOS ends there.
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, DecodeConfig
from aiayn.data.batching import keep_within

log = logging.getLogger(__name__)


def input_tokens(tokenizer, text: str) -> list[int]:
    """Token ids of an input text as the model's training text was read: without edge white space.
    Every training reader strips its lines and fields, and our sentencepiece vocabularies keep white
    space exactly (identity normalization), so a line's trailing space would otherwise become a piece
    that no training text ended with, and one input would answer differently through a file, a
    request and the evaluation of the same text."""
    return tokenizer.encode(text.strip())


def encode_source(tokenizer, text: str, max_len: int | None = None, keep: str = "start") -> list[int]:
    """Token ids of `text` (`input_tokens`) + EOS, truncated to `max_len` ids, EOS kept (callers
    count and log it).

    `tokenizer` is an `aiayn.data.tokenizer.Tokenizer`; its `encode` adds no BOS/EOS.
    `keep`: which end of an over-long text survives ("start"; "end" for `context [SEP] question`).
    """
    return source_ids(input_tokens(tokenizer, text), max_len, keep)


def source_ids(ids: Sequence[int], max_len: int | None = None, keep: str = "start") -> list[int]:
    """Already tokenized source ids -> ids + EOS, at most `max_len` long (EOS kept last).
    `keep="start"` drops the tail of a long source; `keep="end"` drops its head."""
    ids = [int(i) for i in ids]
    if max_len is not None:
        if max_len < 1:
            raise ValueError(f"max_len must be at least 1 (room for EOS), got {max_len}")
        ids = keep_within(ids, max_len - 1, keep)
    return ids + [EOS_ID]


def pad_sources(sources: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> Tensor:
    """Right-pad id lists into one (B, S) long tensor; S = longest (at least 1)."""
    width = max((len(s) for s in sources), default=0) or 1
    out = torch.full((len(sources), width), pad_id, dtype=torch.long)
    for i, ids in enumerate(sources):
        out[i, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return out.to(device)


def max_output_length(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """max(1, ⌊a·|src| + b⌋) target tokens per sentence, EOS included. (B,) -> (B,) long. In float64 and
    with a hair of slack, so a decimal `a` gives what its decimal product does (1.05 · 100 is 105; in
    float32 it came to 104)."""
    return torch.floor(a * src_lengths.double() + b + 1e-9).long().clamp_(min=1)


def output_limits(model, src: Tensor, max_len_a: float | None = None, max_len_b: int | None = None) -> Tensor:
    """Each sentence's maximum output length (see the convention above). src (B, S) -> (B,) long.

    `None` takes the paper's value from `DecodeConfig` (§6.1: |src| + 50); the result never
    exceeds the model's own `max_output_length` (e.g. a learned position table), less the positions a
    source takes where it takes them (`source_takes_positions`: a decoder-only model's prompt).
    """
    d = DecodeConfig()
    a = d.max_len_a if max_len_a is None else max_len_a
    b = d.max_len_b if max_len_b is None else max_len_b
    limits = max_output_length((src != PAD_ID).sum(1), a, b)
    bound = model.max_output_length
    if bound is None:
        return limits
    if getattr(model, "source_takes_positions", False):  # a prompt: its positions are gone, and its last
        bound = bound - src.shape[1] + 1  # token predicts the first output without taking another
    return limits.clamp(max=max(bound, 0))


def banned_tokens(device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Ids that may not be produced: (PAD, BOS), and (PAD, BOS, EOS) before `min_len` tokens.

    Apply with `scores.index_fill_(1, banned[int(step < min_len)], -inf)`: one small
    in-place op per step and no host sync.
    """
    always = [PAD_ID, BOS_ID]
    return (torch.tensor(always, device=device), torch.tensor(always + [EOS_ID], device=device))


def end_where_nothing_is_left_(scores: Tensor, eos: Tensor) -> Tensor:
    """Give their EOS score `eos` (N,) back to the rows of `scores` (N, V) left without a token: min_len
    bans EOS and no_repeat_ngram_size every word. Such an output cannot go on, so min_len gives way:
    greedy search took PAD there, sampling drew from the whole vocabulary, and beam search lost the
    sentence. In place; returns scores."""
    dead = torch.isneginf(scores).all(-1)  # (N,)
    scores[:, EOS_ID] = torch.where(dead, eos, scores[:, EOS_ID])
    return scores


def restrict_(scores: Tensor, bans: tuple[Tensor, Tensor], before_min_len: bool, no_repeat_ngram_size: int = 0,
              history: Tensor | None = None) -> Tensor:
    """Ban, in place, what may not come next in a step of rows at one position (greedy search, a stream):
    PAD and BOS, EOS `before_min_len` (`bans`: `banned_tokens()`), and with `no_repeat_ngram_size` what
    would repeat an n-gram of `history` (N, W); a row left with nothing gets its EOS back
    (`end_where_nothing_is_left_`). Beam search bans per sentence (`beam.advance`). Returns scores."""
    eos = scores[:, EOS_ID].clone() if no_repeat_ngram_size and before_min_len else None  # (N,)
    if no_repeat_ngram_size:
        ban_repeated_ngrams_(scores, history, no_repeat_ngram_size)
    scores.index_fill_(1, bans[int(before_min_len)], float("-inf"))
    return scores if eos is None else end_where_nothing_is_left_(scores, eos)


def ban_repeated_ngrams_(scores: Tensor, history: Tensor, n: int, start: Tensor | None = None) -> Tensor:
    """Set to -inf, in place, each row's scores (N, V) for the tokens that would repeat an n-gram
    its history (N, W) already holds: the token after each earlier occurrence of the row's last
    n - 1 tokens (n = 1: every token already produced). Row i's tokens are history[i, start[i]:]
    (start None: all of them). fairseq's --no-repeat-ngram-size and Hugging Face's
    `no_repeat_ngram_size` do the same; not in the paper. Returns scores."""
    N, W = history.shape
    if n < 1 or W < n:
        return scores
    windows = history.unfold(1, n, 1)  # (N, W - n + 1, n): every n-gram so far
    match = (windows[:, :, : n - 1] == history[:, W - n + 1:, None].transpose(1, 2)).all(-1)  # (N, W - n + 1)
    if start is not None:
        match &= torch.arange(W - n + 1, device=history.device) >= start[:, None]  # n-grams of real tokens only
    rows, at = match.nonzero(as_tuple=True)  # (R,) each
    return scores.index_put_((rows, windows[rows, at, n - 1]), scores.new_tensor(float("-inf")))
