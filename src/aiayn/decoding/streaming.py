"""Step-wise decoding of one sentence: its tokens one at a time, as they are chosen, and its text in
pieces (for a server's streamed answers, and `Generator.generate`).

The steps are those of `greedy.decode_rows` for a batch of one row, choosing as greedy search
(argmax) or sampling (`sampling.filter_logits`, then one draw from `generator`) choose, so the
tokens are the ones `greedy_search` or `sample` give that row alone (the tests compare them). The
caller may stop iterating at any step: nothing is decoded after the token it last took.

    for token in stream_tokens(decoder, src, pick_greedy, max_len_a, max_len_b): ...
    for piece in text_pieces(stream_search(decoder, src, decode, sampling), tokenizer.decode): ...
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID, DecodeConfig, SamplingConfig
from aiayn.decoding.common import banned_tokens, output_limits, restrict_
from aiayn.decoding.interface import Decodable
from aiayn.decoding.sampling import sampling_probs

Pick = Callable[[Tensor], int]  # scores (1, V) -> the chosen id


def pick_greedy(scores: Tensor) -> int:
    return int(scores.argmax(-1))


def pick_sample(config: SamplingConfig, generator: torch.Generator | None = None) -> Pick:
    """One draw from `sampling.sampling_probs`, as `sampling.sample` draws."""
    def pick(scores: Tensor) -> int:
        probs = sampling_probs(scores, config)  # (1, V)
        return int(torch.multinomial(probs, 1, generator=generator))
    return pick


def stream_tokens(model: Decodable, src: Tensor, pick: Pick, max_len_a: float | None = None,
                  max_len_b: int | None = None, min_len: int = 0, no_repeat_ngram_size: int = 0) -> Iterator[int]:
    """The output ids of the one source row src (1, S), each yielded once chosen; EOS ends the output
    and is not yielded, as is the output length limit (`common.output_limits`)."""
    limit = int(output_limits(model, src, max_len_a, max_len_b)[0])
    bans = banned_tokens(src.device)
    with torch.inference_mode():
        state = model.start(src, capacity=limit)
    token = torch.full((1,), BOS_ID, dtype=torch.long, device=src.device)
    out: list[int] = []
    for t in range(limit):
        with torch.inference_mode():  # not across the yield: the caller's code runs outside it
            scores = model.step(token, state)  # (1, V)
            history = torch.tensor([out], dtype=torch.long, device=src.device) if no_repeat_ngram_size else None
            chosen = pick(restrict_(scores, bans, t < min_len, no_repeat_ngram_size, history))
        if chosen == EOS_ID:
            return
        out.append(chosen)
        yield chosen
        token.fill_(chosen)


def stream_search(model: Decodable, src: Tensor, decode: DecodeConfig, sampling: SamplingConfig,
                  seed: int | None = None) -> Iterator[int]:
    """`stream_tokens` with `decode`'s method (greedy, or sample with `sampling`) and length limits.
    A sample is drawn from a generator seeded with `seed` (else `sampling.seed`; neither: torch's own)."""
    if decode.method == "sample":
        seed = sampling.seed if seed is None else seed
        generator = None if seed is None else torch.Generator(device=src.device).manual_seed(seed)
        pick = pick_sample(sampling, generator)
    elif decode.method == "greedy" or decode.beam_size == 1:
        pick = pick_greedy
    else:
        raise ValueError("beam search does not stream: its best hypothesis is known only when it ends")
    return stream_tokens(model, src, pick, decode.max_len_a, decode.max_len_b, decode.min_len,
                         decode.no_repeat_ngram_size)


def text_pieces(tokens: Iterable[int], decode: Callable[[list[int]], str]) -> Iterator[str]:
    """The text of `tokens` in pieces, each the new end of `decode(tokens so far)`; joined, they are
    `decode(all tokens)`. A piece is held back while the text so far ends in an incomplete character
    (U+FFFD). A tokenizer that rewrites text already sent (a cleanup rule joining " n't" to "do") cannot
    be followed exactly: the stream goes on from where its text and the sent one part, so nothing after
    the rewrite is lost, and the joined pieces keep what was sent before it ("do n't" for "don't")."""
    ids: list[int] = []
    sent = ""
    for token in tokens:
        ids.append(token)
        text = decode(ids)
        if len(text) > len(sent) and not text.endswith("\ufffd"):
            yield text[len(os.path.commonprefix([sent, text])):]
            sent = text
    text = decode(ids)
    if text != sent and len(text) >= len(sent):
        yield text[len(os.path.commonprefix([sent, text])):]
