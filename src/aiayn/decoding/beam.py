"""Beam search, batched over sentences × beams, on the model's decoding state (its key/value cache).

Scoring. A hypothesis Y is ranked by log P(Y | X) / lp(|Y|), with lp the GNMT penalty
((5 + |Y|) / 6) ** α by default (the paper, §6.1, α = 0.6) or |Y| ** α
(`length_penalty_form="plain"`, as in fairseq / Hugging Face); see `length_penalty`.
|Y| counts the generated tokens including EOS.

Step t (t tokens already in every live beam). For each sentence the K live beams are
extended by every token; of the K·V candidates the best 2K are ranked. Candidates that
end in EOS and rank among the first K become finished hypotheses (kept to the end);
the first K candidates that do not end in EOS become the next live beams, so a sentence
always has K live beams. At a sentence's last allowed step its first K candidates are
all finished, EOS or not.

Early stopping. Log-probabilities only fall and lp only grows with |Y|, so a live beam
with cumulative log-probability s <= 0 can end with a score of at most s / lp(L), L the
sentence's length limit. Once a sentence has `nbest` finished hypotheses and this
bound for its best live beam is no better than its nbest-th finished score, nothing can
enter its n-best list and it is dropped from the batch.

The model is reached only through the decoding interface (`interface.Decodable`).

State (B' = sentences still searching, K = beam size, W = history width):
    state:   the model's decoding state, N = B'·K rows; row b·K + k is beam k of active sentence b
    last:    (N,) long       token each row feeds to the next step (BOS at first)
    scores:  (B', K) float   cumulative log-probability of each live beam (-inf: unused)
    history: (B', K, W) long tokens of each live beam, BOS excluded, from column start[b]
    start:   (B',) long      where each sentence's tokens begin in history: 0 here; sentences that
                             join a running search later (`continuous`) start further right
    limits:  (B',) long      max tokens, EOS included (`common.max_output_length`)
    ids:     (B',) long      each active sentence's key in `finished`, on the CPU (bookkeeping only)
    finished: B lists of `Hypothesis` (or a dict of them), indexed by ids

Host syncs. Which hypotheses finish and which sentences stop is decided on the host, from one
small summary of the step copied from the device (`_summary`); a second copy fetches the finished
hypotheses' tokens at the steps where some finish. On CUDA every other op of a step is queued
without waiting for the GPU (the search once waited four times a step, and more where hypotheses
finished: `benchmarks/beam_syncs.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, DecodeConfig
from aiayn.decoding.common import ban_repeated_ngrams_, banned_tokens, end_where_nothing_is_left_, output_limits
from aiayn.decoding.interface import Decodable
from aiayn.decoding.length_penalty import length_penalty


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log_prob / lp(|Y|)
    log_prob: float  # sum of token log-probabilities, EOS included when present


@dataclass
class _State:
    last: Tensor
    scores: Tensor
    history: Tensor
    start: Tensor
    limits: Tensor
    ids: Tensor
    finished: list[list[Hypothesis]] | dict[int, list[Hypothesis]] = field(default_factory=list)


@torch.inference_mode()
def beam_search(model: Decodable, src: Tensor, config: DecodeConfig | None = None) -> list[list[Hypothesis]]:
    """n-best lists (best first, `config.nbest` long) for each row of src (B, S).

    `config` defaults to `DecodeConfig()` (beam 4, GNMT α = 0.6, |src| + 50 tokens);
    its `min_len` forbids EOS before that many tokens. With beam_size 1 this is not greedy search:
    a finished hypothesis does not end the live one, which may still score higher (the doors send
    beam_size 1 to `greedy_search`, as `DecodeConfig` says).
    """
    cfg = config or DecodeConfig()
    B = src.shape[0]
    if B == 0:
        return []
    state, beams = start_beams(model, src, cfg, torch.arange(B), [[] for _ in range(B)])
    bans = banned_tokens(src.device)[0]  # PAD, BOS; `advance` bans EOS before min_len
    for _ in range(int(beams.limits.max())):
        logits = model.step(beams.last, state)  # (N, V)
        logp = torch.log_softmax(logits.float(), dim=-1).index_fill_(1, bans, float("-inf"))
        n_before = beams.ids.numel()
        beams, rows = advance(beams, logp, cfg)
        if beams.ids.numel() == 0:
            break
        if beams.ids.numel() == n_before:
            state.reorder_(rows)  # beams moved within their sentence: source-side state unchanged
        else:
            state = state.reorder(rows)  # finished sentences leave the batch
    return [sorted(h, key=lambda x: -x.score)[: cfg.nbest] for h in beams.finished]


def start_beams(model: Decodable, src: Tensor, cfg: DecodeConfig, ids: Tensor, finished) -> tuple:
    """Encode src (B, S) and set up its search: (the model's state with K rows per sentence, the
    beams, nothing decoded yet). `ids` (B,) on the CPU: the sentences' keys in `finished`."""
    K = cfg.beam_size
    limits = output_limits(model, src, cfg.max_len_a, cfg.max_len_b)  # (B,)
    state = model.start(src, capacity=int(limits.max()))
    state = state.reorder(torch.arange(src.shape[0], device=src.device).repeat_interleave(K))  # (B·K) rows
    return state, _initial_beams(K, limits, ids, finished)


def _initial_beams(K: int, limits: Tensor, ids: Tensor, finished) -> _State:
    B, device = ids.numel(), limits.device
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live beam at first, so the K beams do not start as copies
    return _State(
        last=torch.full((B * K,), BOS_ID, dtype=torch.long, device=device),
        scores=scores,
        history=torch.empty(B, K, 0, dtype=torch.long, device=device),
        start=torch.zeros(B, dtype=torch.long, device=device),
        limits=limits,
        ids=ids,
        finished=finished,
    )


def top_candidates(cand: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The n best of cand (B', K, V) over its K·V continuations: scores (B', n), best first, and their flat
    indices beam·V + token. In two stages, each beam's n best and then the n best of those (each of the n
    best is among its beam's n best): each beam's selection runs apart, over V rather than K·V
    (`benchmarks/beam_profile.py --size opus`, its topk row)."""
    Bn, K, V = cand.shape
    m = min(n, V)  # a vocabulary smaller than n: all of it
    scores, tokens = cand.topk(m, dim=2)  # (B', K, m)
    top, j = scores.view(Bn, K * m).topk(n, dim=1)  # (B', n)
    return top, torch.div(j, m, rounding_mode="floor") * V + tokens.view(Bn, K * m).gather(1, j)


def advance(state: _State, logp: Tensor, cfg: DecodeConfig) -> tuple[_State, Tensor]:
    """One beam step. logp: (N, V). Returns the new beams and the model-state rows (N',) to keep."""
    Bn, K = state.scores.shape
    V = logp.shape[-1]
    W = state.history.shape[2]
    t = W - state.start  # (B',) tokens so far in each sentence
    eos = logp[:, EOS_ID].clone() if cfg.min_len and cfg.no_repeat_ngram_size else None  # (N,)
    if cfg.min_len:  # per sentence: a continuous search's sentences are at different steps
        logp[:, EOS_ID].masked_fill_((t < cfg.min_len).repeat_interleave(K), float("-inf"))
    if cfg.no_repeat_ngram_size:
        ban_repeated_ngrams_(logp, state.history.reshape(Bn * K, W), cfg.no_repeat_ngram_size,
                             state.start.repeat_interleave(K))
    if eos is not None:
        end_where_nothing_is_left_(logp, eos)
    cand = logp.view(Bn, K, V).add_(state.scores[:, :, None])  # (B', K, V), in place: no new (N, V)
    top_scores, top_flat = top_candidates(cand, 2 * K)  # (B', 2K), best first
    top_beam, top_tok = top_flat // V, top_flat % V  # (B', 2K)
    is_eos = top_tok == EOS_ID
    last_step = state.limits <= t + 1  # (B',) this token is the last allowed

    rank = torch.arange(2 * K, device=logp.device)
    pick = (rank + 2 * K * is_eos.long()).topk(K, dim=1, largest=False).indices  # (B', K) first K non-EOS
    scores = top_scores.gather(1, pick)  # (B', K)
    beam, tok = top_beam.gather(1, pick), top_tok.gather(1, pick)  # (B', K)
    history = torch.cat([state.history.gather(1, beam[:, :, None].expand(-1, -1, W)), tok[:, :, None]], 2)
    rows = (torch.arange(Bn, device=logp.device)[:, None] * K + beam)  # (B', K) state rows to follow

    summary = _summary(state, top_scores, top_tok, is_eos, last_step, t, scores, cfg)  # the step's one sync
    ids = state.ids.tolist()  # on the CPU: no wait
    _finish(state, summary, ids, top_beam)
    keep = [not (s.last_step or _cannot_improve(state.finished[i], s, cfg.nbest)) for i, s in zip(ids, summary)]
    if all(keep):
        return _State(tok.reshape(-1), scores, history, state.start, state.limits, state.ids,
                      state.finished), rows.reshape(-1)
    kept = torch.tensor([b for b, k in enumerate(keep) if k], dtype=torch.long)  # (B'',) on the CPU
    on = kept.to(logp.device, non_blocking=True)  # from pageable memory: staged at once, no wait for the GPU
    new = _State(tok[on].reshape(-1), scores[on], history[on], state.start[on], state.limits[on],
                 state.ids[kept], state.finished)
    return new, rows[on].reshape(-1)


class _Sentence:
    """One sentence's step as the host reads it (`_summary`): a row of 3K + 5 numbers,
    [eos (K) | tok (K) | score (K) | start, lp, lp_max, best_live, last_step], over the first K
    candidates of the sentence. score: a candidate's cumulative log-probability (-inf: none);
    start: where the sentence's tokens begin in history; lp: lp(t + 1), the length penalty of a
    hypothesis that ends here; lp_max: lp at the sentence's length limit; best_live: its best live
    beam's cumulative log-probability after this step; last_step: this token is the last allowed."""

    __slots__ = ("row", "K")

    def __init__(self, row: list[float], K: int):
        self.row, self.K = row, K

    def done(self) -> list[int]:
        """The candidates that finish here: those ending in EOS, or all at the last step."""
        K, row, last = self.K, self.row, self.last_step
        return [j for j in range(K) if (last or row[j]) and math.isfinite(row[2 * K + j])]

    def candidate(self, j: int) -> tuple[bool, int, float]:
        """(ends in EOS, token, cumulative log-probability) of candidate j."""
        K, row = self.K, self.row
        return bool(row[j]), int(row[K + j]), row[2 * K + j]

    @property
    def start(self) -> int:
        return int(self.row[3 * self.K])

    @property
    def lp(self) -> float:
        return self.row[3 * self.K + 1]

    @property
    def bound(self) -> float:
        """The best score its live beams can still reach: live scores are <= 0, so the longest length
        gives the bound."""
        return self.row[3 * self.K + 3] / self.row[3 * self.K + 2]

    @property
    def last_step(self) -> bool:
        return bool(self.row[3 * self.K + 4])


def _summary(state: _State, top_scores, top_tok, is_eos, last_step, t, scores, cfg: DecodeConfig) -> list[_Sentence]:
    """One copy from the device: (B', 3K + 5) values as float64 (exact for float32 scores and token
    ids) -> a `_Sentence` per sentence. The length penalties are computed where the scores are, so
    a search decides alike on either device."""
    K = cfg.beam_size
    lps = length_penalty(torch.stack([t + 1, state.limits], 1), cfg.length_penalty, cfg.length_penalty_form)
    parts = (is_eos[:, :K].double(), top_tok[:, :K], top_scores[:, :K], state.start[:, None],
             lps.to(top_scores.device), scores[:, :1], last_step[:, None])  # cat promotes all to float64
    return [_Sentence(row, K) for row in torch.cat(parts, 1).tolist()]


def _finish(state: _State, summary: list[_Sentence], ids: list[int], top_beam: Tensor) -> None:
    """Record the finished hypotheses among the first K candidates of each sentence (`ids`: their keys in
    `finished`): their tokens come back in one copy, at the steps where any finish."""
    done = [(b, j) for b, s in enumerate(summary) for j in s.done()]  # (D,) pairs
    if not done:
        return
    b, j = (torch.tensor(x).to(top_beam.device, non_blocking=True) for x in zip(*done))  # (D,) each
    tokens = state.history[b, top_beam[b, j]].tolist()  # (D, W)
    for (b, j), row in zip(done, tokens):
        s = summary[b]
        eos, tok, log_prob = s.candidate(j)
        row = row[s.start:] if eos else row[s.start:] + [tok]
        state.finished[ids[b]].append(Hypothesis(row, log_prob / s.lp, log_prob))


def _cannot_improve(finished: list[Hypothesis], s: _Sentence, nbest: int) -> bool:
    """The sentence's best live beam cannot beat its nbest-th finished score."""
    if len(finished) < nbest:
        return False
    return s.bound <= sorted((h.score for h in finished), reverse=True)[nbest - 1]
