"""`no_repeat_ngram_size`: no output holds an n-gram twice, in every search."""

import math
import random
from dataclasses import replace

import pytest
import torch

from aiayn.config import EOS_ID, ConfigError, DecodeConfig, SamplingConfig
from aiayn.decoding import beam_search, greedy_search
from aiayn.decoding.common import ban_repeated_ngrams_
from aiayn.decoding.sampling import sample

from fake_decoder import A, B_, C, FakeModel
from test_beam import sources, tiny
from test_continuous import rows, run_continuous


def banned_by_hand(history: list[list[int]], start: list[int], n: int, vocab: int) -> torch.Tensor:
    """The rule written out: after row i's real tokens, ban the token that followed every earlier
    occurrence of its last n - 1 tokens."""
    out = torch.zeros(len(history), vocab)
    for i, row in enumerate(history):
        tokens = row[start[i]:]
        prefix = tokens[len(tokens) - n + 1:] if n > 1 else []
        for j in range(len(tokens) - n + 1):
            if tokens[j:j + n - 1] == prefix:
                out[i, tokens[j + n - 1]] = float("-inf")
    return out


def test_the_vectorised_rule_equals_the_rule_by_hand():
    rng = random.Random(0)
    for _ in range(300):
        N, W, V, n = rng.randint(1, 5), rng.randint(0, 9), 6, rng.randint(1, 4)
        history = [[rng.randrange(V) for _ in range(W)] for _ in range(N)]
        start = [rng.randint(0, W) for _ in range(N)]
        got = ban_repeated_ngrams_(torch.zeros(N, V), torch.tensor(history, dtype=torch.long).view(N, W), n,
                                   torch.tensor(start))
        assert torch.equal(got, banned_by_hand(history, start, n, V)), (history, start, n)


# a b a, then b .8 / c .15 / EOS .05: with n = 2 the bigram "a b" may not come back, so c follows
TABLE = {(): {A: 0.9, B_: 0.1}, (A,): {B_: 0.9, EOS_ID: 0.1}, (A, B_): {A: 0.9, EOS_ID: 0.1},
         (A, B_, A): {B_: 0.8, C: 0.15, EOS_ID: 0.05}}
SRC = torch.tensor([[A, EOS_ID]])


@pytest.mark.parametrize("n,want", [(0, [A, B_, A, B_]), (2, [A, B_, A, C]), (3, [A, B_, A, B_])])
def test_known_probabilities(n, want):
    assert greedy_search(FakeModel(TABLE), SRC, 0.0, 6, no_repeat_ngram_size=n) == [want]
    cfg = DecodeConfig(beam_size=2, length_penalty=0.0, max_len_a=0.0, max_len_b=6, no_repeat_ngram_size=n)
    best = beam_search(FakeModel(TABLE), SRC, cfg)[0][0]
    p_last = {B_: 0.8, C: 0.15}[want[-1]]
    assert best.tokens == want and best.log_prob == pytest.approx(math.log(0.9 ** 3 * p_last))


def repeats(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def test_every_search_on_a_real_model(device):
    # an untrained model repeats itself: the option must change that in every search
    model, src = tiny().to(device).fast_decoder(), sources().to(device)
    cfg = DecodeConfig(beam_size=3, nbest=3, max_len_a=0.0, max_len_b=12)
    sampling = SamplingConfig(temperature=0.5, seed=0)
    searches = {
        "greedy": lambda n: greedy_search(model, src, 0.0, 12, no_repeat_ngram_size=n),
        "beam": lambda n: [h.tokens for hyps in beam_search(model, src, replace(cfg, no_repeat_ngram_size=n))
                           for h in hyps],
        "sample": lambda n: sample(model, src, sampling, max_len_a=0.0, max_len_b=12, no_repeat_ngram_size=n),
    }
    for name, search in searches.items():
        assert any(repeats(out, 2) for out in search(0)), name  # else this test could not fail
        assert not any(repeats(out, 2) for out in search(2)), name
    cfg1 = DecodeConfig(beam_size=1, length_penalty=0.0, max_len_a=0.0, max_len_b=12, no_repeat_ngram_size=2)
    assert [h[0].tokens for h in beam_search(model, src, cfg1)] == searches["greedy"](2)  # beam 1 = greedy


def test_continuous_search_follows_the_rule_as_beam_search_alone():
    model = tiny()
    torch.manual_seed(1)
    src = rows(torch.cat([sources(), sources()]))
    cfg = DecodeConfig(beam_size=3, max_len_b=10, no_repeat_ngram_size=2)
    got = run_continuous(model.fast_decoder(), cfg, {0: src[:3], 2: src[3:6], 5: src[6:]}, "cpu")
    for i, ids in enumerate(src):
        assert got[i][0].tokens == beam_search(model, torch.tensor([ids]), cfg)[0][0].tokens, i


def test_a_negative_size_is_refused():
    with pytest.raises(ConfigError, match="no_repeat_ngram_size must be >= 0"):
        DecodeConfig(no_repeat_ngram_size=-1)


def test_a_row_left_without_a_token_ends_in_every_search():
    """After "a", min_len 3 bans EOS and no_repeat_ngram_size 1 bans "a", the only word: greedy search took
    PAD, sampling drew from the whole vocabulary (PAD, BOS, a repeated "a"), beam search lost the sentence.
    Now min_len gives way: every search ends after "a"."""
    from aiayn.decoding.streaming import stream_search

    table = {(): {A: 1.0}, (A,): {A: 0.5, EOS_ID: 0.5}}
    cfg = DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=4, min_len=3, no_repeat_ngram_size=1)
    assert greedy_search(FakeModel(table), SRC, 0.0, 4, min_len=3, no_repeat_ngram_size=1) == [[A]]
    assert [h.tokens for h in beam_search(FakeModel(table), SRC, cfg)[0]] == [[A]]
    for seed in range(5):
        drawn = sample(FakeModel(table), SRC, SamplingConfig(), torch.Generator().manual_seed(seed), max_len_a=0.0,
                       max_len_b=4, min_len=3, no_repeat_ngram_size=1)
        assert drawn == [[A]], seed
        streamed = stream_search(FakeModel(table), SRC, replace(cfg, method="sample"), SamplingConfig(), seed=seed)
        assert list(streamed) == [A]
