"""Step-wise decoding (`decoding.streaming`): the tokens of greedy search and of sampling for one
sentence, one at a time, exactly those of `greedy_search` and `sample`; text in pieces that join
into the whole text."""

import torch

from aiayn.config import DecodeConfig, SamplingConfig
from aiayn.decoding import greedy_search, sample
from aiayn.decoding.streaming import pick_greedy, pick_sample, stream_search, stream_tokens, text_pieces

from test_beam import sources, tiny


def test_stream_tokens_are_greedy_search_and_sampling_of_one_row():
    model = tiny()
    decoder = model.fast_decoder()
    for row in sources():
        src = row[row != 0][None]  # (1, S)
        assert list(stream_tokens(decoder, src, pick_greedy, 0.0, 9)) == greedy_search(model, src, 0.0, 9)[0]
        assert list(stream_tokens(decoder, src, pick_greedy, 0.0, 9, no_repeat_ngram_size=2)) == \
            greedy_search(model, src, 0.0, 9, no_repeat_ngram_size=2)[0]
        config = SamplingConfig(temperature=1.3, top_k=5)
        drawn = list(stream_tokens(decoder, src, pick_sample(config, torch.Generator().manual_seed(3)), 0.0, 9))
        want = sample(model, src, config, generators=[torch.Generator().manual_seed(3)], max_len_a=0.0, max_len_b=9)[0]
        assert drawn == want


def test_stream_search_follows_the_decode_settings():
    model = tiny()
    src = sources()[:1]
    greedy = DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=7)
    assert list(stream_search(model.fast_decoder(), src, greedy, SamplingConfig())) == greedy_search(model, src, 0.0, 7)[0]


def test_stopping_early_decodes_nothing_more():
    model = tiny()
    calls = []
    decoder = model.fast_decoder()

    class Counting:
        def __getattr__(self, name):
            return getattr(decoder, name)

        def step(self, tokens, cache):
            calls.append(1)
            return decoder.step(tokens, cache)

    tokens = stream_tokens(Counting(), sources()[:1], pick_greedy, 0.0, 50)
    next(tokens), next(tokens)
    tokens.close()
    assert len(calls) == 2


def test_text_pieces_join_into_the_text():
    words = {4: "Ein", 5: "Hund", 6: "läuft", 7: "."}
    decode = lambda ids: " ".join(words[i] for i in ids).replace(" .", ".")  # noqa: E731  an end rewritten
    pieces = list(text_pieces([4, 5, 6, 7], decode))
    assert pieces == ["Ein", " Hund", " läuft", "."] and "".join(pieces) == decode([4, 5, 6, 7])
    broken = lambda ids: "ab\ufffd" if len(ids) == 1 else "abc"  # noqa: E731  half a character at first
    assert list(text_pieces([1, 2], broken)) == ["abc"]


def test_a_tokenizer_that_rewrites_sent_text_loses_nothing_after_it():
    """Joining " n't" to "do" rewrote text already sent; every later piece was held back, the end too."""
    pieces = {1: "do", 2: " ", 3: "n't", 4: " it"}

    def decode(ids):
        return "".join(pieces[i] for i in ids).replace(" n't", "n't")

    out = list(text_pieces([1, 2, 3, 4], decode))
    assert out[-1] == " it"  # "do " was sent, then "n't", then " it"
    assert "".join(out) == "do n't it"  # the space sent before the rewrite stays
