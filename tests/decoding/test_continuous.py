"""Continuous beam search: sentences that join a running search at any step, and leave it when
they end, get exactly the n-best lists that beam search gives each of them alone."""

import pytest
import torch

from aiayn.config import PAD_ID, DecodeConfig
from aiayn.decoding import beam_search
from aiayn.decoding.continuous import ContinuousBeamSearch
from aiayn.modules.cache import KVCache
from aiayn.modules.cache_merge import concat

from test_beam import sources, tiny


def rows(src: torch.Tensor) -> list[list[int]]:
    return [r[r != PAD_ID].tolist() for r in src]


def run_continuous(decoder, cfg, arrivals: dict[int, list[list[int]]], device) -> dict[int, list]:
    """arrivals: step -> sources joining before that step. -> key (arrival order) -> n-best list."""
    search, results, key, step = ContinuousBeamSearch(decoder, cfg, device), {}, 0, 0
    while step <= max(arrivals) or len(search):
        assert step < 200, "the search never ran dry"  # fail, do not hang
        joining = arrivals.get(step, [])
        if joining:
            search.add(joining, keys=range(key, key + len(joining)))
            key += len(joining)
        results.update(search.step())
        step += 1
    assert not search.finished  # nothing left behind
    return results


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned"}, {"copy_attention": True}])
@pytest.mark.parametrize("form,alpha,nbest", [("gnmt", 0.6, 1), ("plain", 1.0, 3)])
def test_sentences_joining_at_any_step_get_their_own_beam_search(overrides, form, alpha, nbest, device):
    model = tiny(**overrides).to(device)
    torch.manual_seed(1)
    src = rows(torch.cat([sources(), sources()]).to(device))  # 8 sentences of 1 to 6 tokens + EOS
    cfg = DecodeConfig(beam_size=3, nbest=nbest, length_penalty=alpha, length_penalty_form=form, max_len_b=6)
    arrivals = {0: src[:2], 1: src[2:3], 3: src[3:6], 4: src[6:7], 9: src[7:]}  # 9: after the search ran dry
    got = run_continuous(model.fast_decoder(), cfg, arrivals, device)
    assert sorted(got) == list(range(len(src)))
    for i, ids in enumerate(src):
        alone = beam_search(model, torch.tensor([ids], device=device), cfg)[0]
        assert [h.tokens for h in got[i]] == [h.tokens for h in alone], i
        assert [h.score for h in got[i]] == pytest.approx([h.score for h in alone], abs=1e-4)


class _CountingDecoder:
    """A decoder that records, at each step, how many rows it decoded and how many beams the search had."""

    def __init__(self, decoder):
        self.decoder, self.search, self.calls = decoder, None, []

    def __getattr__(self, name):
        return getattr(self.decoder, name)

    def step(self, tokens, cache):
        beams = self.search.beams
        self.calls.append((tokens.shape[0], cache.batch_size, beams.ids.numel() * self.search.config.beam_size))
        return self.decoder.step(tokens, cache)


@pytest.mark.parametrize("waiting", [False, True], ids=["alone", "others-waiting"])
def test_rows_of_ended_sentences_are_never_decoded(waiting):
    model = tiny()
    torch.manual_seed(1)
    src = rows(torch.cat([sources(), sources()]))
    counting = _CountingDecoder(model.fast_decoder())
    search = counting.search = ContinuousBeamSearch(counting, DecodeConfig(beam_size=3, max_len_b=6))
    search.add(src[:4], keys=range(4))
    key, ended = 4, 0
    while len(search):
        assert len(counting.calls) < 200, "the search never ran dry"
        done = search.step()
        ended += len(done)
        if waiting and done and key < len(src):  # a new sentence arrives as one ends, as at a server
            search.add([src[key]], keys=[key])
            key += 1
    assert ended == (len(src) if waiting else 4)
    assert len(counting.calls) > 5
    for decoded, cached, live in counting.calls:
        assert decoded == cached == live


def test_the_cache_drops_columns_no_row_uses():
    # Without trimming, a server that never runs dry would grow its cache forever.
    model = tiny()
    cfg = DecodeConfig(beam_size=2, max_len_b=3)
    search = ContinuousBeamSearch(model.fast_decoder(), cfg)
    search.add([[5, 6, 2]], keys=[0])
    widths = []
    for step in range(40):
        search.add([[7, 8, 9, 2]], keys=[step + 1])  # a new sentence every step
        search.step()
        widths.append(search.cache.length)
    limit = 4 + 3  # |src| + max_len_b tokens: no sentence stays longer; ended ones leave at the next join
    assert max(widths) <= limit + search.join_every  # bounded: not 40 columns wide


def test_concat_right_aligns_rows_and_pads_sources():
    a = KVCache([(torch.ones(2, 1, 3, 2), torch.ones(2, 1, 3, 2))], torch.ones(2, 3, dtype=torch.bool), capacity=4)
    a.append(0, torch.full((2, 1, 2, 2), 5.0), torch.full((2, 1, 2, 2), 6.0))
    a.advance(2)
    b = KVCache([(torch.ones(1, 1, 5, 2), torch.ones(1, 1, 5, 2))], torch.ones(1, 5, dtype=torch.bool))
    c = concat(a, b)
    assert c.length == 2 and c.start.tolist() == [0, 0, 2]
    assert c.cross_k[0].shape == (3, 1, 5, 2) and c.src_mask.tolist()[0] == [True] * 3 + [False] * 2
    assert c.self_k[0][:2, :, :2].eq(5).all() and c.self_k[0][2, :, :2].eq(0).all()  # finite where masked
    assert c.positions().tolist() == [2, 2, 0]
    assert c.self_mask()[:, 0, 0].tolist() == [[True] * 3, [True] * 3, [False, False, True]]


def test_refuses_decoders_and_settings_it_cannot_run():
    model = tiny()
    with pytest.raises(ValueError, match="different positions"):
        ContinuousBeamSearch(model, DecodeConfig())  # the module's own step assumes one position
    with pytest.raises(ValueError, match="beam_size >= 2"):
        ContinuousBeamSearch(model.fast_decoder(), DecodeConfig(beam_size=1))


def test_reorder_keeps_the_usual_cache_usual():
    # beam_search reorders through concat; rows that all start at column 0 need no masks or per-row positions
    model = tiny()
    with torch.no_grad():
        cache = model.start(sources())
        model.step(torch.full((4,), 5), cache)
        cache = cache.reorder(torch.tensor([3, 3, 0]))
        assert cache.length == 1 and cache.start is None and cache.positions() is None and cache.self_mask() is None
        ragged = concat(cache, model.start(sources()[:2]))  # 2 rows with no position yet join 3 with one
        assert ragged.start.tolist() == [0, 0, 0, 1, 1]
        with pytest.raises(ValueError, match="different positions"):  # the module's own step would ignore them
            model.step(torch.full((5,), 5), ragged)
