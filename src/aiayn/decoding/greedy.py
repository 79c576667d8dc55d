"""Batched greedy decoding through the decoding interface (`interface.Decodable`), and the
one-token-per-row loop that sampling shares.

Every row stops at EOS or at its own length limit (`common.max_output_length`), so a
sentence's output never depends on the rest of its batch.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.common import banned_tokens, max_output_length, output_limits, restrict_
from aiayn.decoding.interface import Decodable

__all__ = ["greedy_search", "decode_rows", "max_output_length"]

Picker = Callable[[Tensor, Tensor], Tensor]  # scores (N, V), each row's index in src (N,) -> chosen ids (N,)


@torch.inference_mode()
def decode_rows(model: Decodable, src: Tensor, pick: Picker, max_len_a: float | None = None,
                max_len_b: int | None = None, min_len: int = 0, no_repeat_ngram_size: int = 0) -> list[list[int]]:
    """Decode each row of src (B, S) one token per step, choosing with `pick`; with
    `no_repeat_ngram_size` n, never an n-gram a row already produced (`ban_repeated_ngrams_`).

    Returns token ids without BOS/EOS. Every few steps, once a quarter of the rows are
    done, they leave the batch (`state.reorder`). State (N = rows still decoding):
        state:  the model's   from `model.start`, N rows
        tokens: (N,) long     the last token of every row (BOS at first)
        rows:   (N,) long     each row's index in src
        alive:  (N,) bool     rows that have neither produced EOS nor reached their limit
        out:    (B, L) long   produced tokens, L = the longest limit; cut at EOS/limit at the end
    """
    if src.shape[0] == 0:
        return []
    limits = output_limits(model, src, max_len_a, max_len_b)  # (B,)
    steps = int(limits.max())
    state = model.start(src, capacity=steps)
    B = src.shape[0]
    tokens = torch.full((B,), BOS_ID, dtype=torch.long, device=src.device)
    rows = torch.arange(B, device=src.device)
    out = torch.full((B, steps), PAD_ID, dtype=torch.long, device=src.device)
    alive = torch.ones(B, dtype=torch.bool, device=src.device)
    row_limits, bans = limits, banned_tokens(src.device)
    for t in range(steps):
        scores = model.step(tokens, state)  # (N, V)
        # rows already ended get PAD for a history, so they keep a token to draw
        history = out[rows, :t].masked_fill_(~alive[:, None], PAD_ID) if no_repeat_ngram_size else None  # (N, t)
        tokens = pick(restrict_(scores, bans, t < min_len, no_repeat_ngram_size, history), rows)  # (N,)
        out[rows, t] = tokens
        alive &= (tokens != EOS_ID) & (row_limits > t + 1)
        if t % 8 == 7:  # a host sync every few steps only
            n_alive = int(alive.sum())
            if n_alive == 0:
                break
            if n_alive <= 0.75 * alive.numel():
                keep = alive.nonzero().squeeze(1)  # (N',)
                state, tokens, rows, alive, row_limits = (state.reorder(keep), tokens[keep], rows[keep],
                                                          alive[keep], row_limits[keep])
    return _strip(out, limits)


def _strip(out: Tensor, limits: Tensor) -> list[list[int]]:
    rows = []
    for row, limit in zip(out.tolist(), limits.tolist()):
        row = row[:limit]
        rows.append(row[: row.index(EOS_ID)] if EOS_ID in row else row)
    return rows


def _argmax(scores: Tensor, rows: Tensor) -> Tensor:
    return scores.argmax(-1)


def greedy_search(model: Decodable, src: Tensor, max_len_a: float | None = None, max_len_b: int | None = None,
                  min_len: int = 0, no_repeat_ngram_size: int = 0) -> list[list[int]]:
    """argmax decoding of a padded batch src (B, S). Returns token ids without BOS/EOS.

    `max_len_a`/`max_len_b` default to `DecodeConfig` (|src| + 50, §6.1); `min_len`
    forbids EOS before that many tokens (0: never forbidden).
    """
    return decode_rows(model, src, _argmax, max_len_a, max_len_b, min_len, no_repeat_ngram_size)
