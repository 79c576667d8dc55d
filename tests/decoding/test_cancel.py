"""ContinuousBeamSearch.cancel: a cancelled sentence leaves the running search at once (its rows
are never decoded again), and every other sentence still gets the beam search it gets alone."""

import pytest
import torch

from aiayn.config import DecodeConfig
from aiayn.decoding import beam_search
from aiayn.decoding.continuous import ContinuousBeamSearch

from test_beam import sources, tiny
from test_continuous import _CountingDecoder, rows


@pytest.mark.parametrize("when", [0, 1, 3], ids=["waiting", "first-step", "running"])
def test_cancelled_sentences_leave_and_the_others_keep_their_search(when):
    model = tiny()
    torch.manual_seed(1)
    src = rows(torch.cat([sources(), sources()]))
    cfg = DecodeConfig(beam_size=3, max_len_b=8)
    counting = _CountingDecoder(model.fast_decoder())
    search = counting.search = ContinuousBeamSearch(counting, cfg)
    search.add(src[:6], keys=range(6))
    got, step = {}, 0
    while len(search):
        assert step < 200, "the search never ran dry"
        if step == when:
            live = len(search)
            assert search.cancel([1, 4, 99]) == 2  # 99: unknown, ignored
            assert len(search) == live - 2
            assert search.cancel([1]) == 0  # gone already
        got.update(search.step())
        step += 1
    assert sorted(got) == [0, 2, 3, 5] and not search.finished
    for i in got:
        alone = beam_search(model, torch.tensor([src[i]]), cfg)[0]
        assert [h.tokens for h in got[i]] == [h.tokens for h in alone], i
    for decoded, cached, live in counting.calls:  # no row of a cancelled sentence decoded after its cancel
        assert decoded == cached == live


def test_cancelling_every_sentence_empties_the_search_and_it_takes_new_ones():
    model = tiny()
    src = rows(sources())
    search = ContinuousBeamSearch(model.fast_decoder(), DecodeConfig(beam_size=2, max_len_b=8))
    search.add(src[:2], keys=[0, 1])
    search.step()
    assert search.cancel([0, 1]) == 2 and len(search) == 0 and search.step() == []
    search.add([src[2]], keys=[7])
    done = {}
    while len(search):
        done.update(search.step())
    alone = beam_search(model, torch.tensor([src[2]]), DecodeConfig(beam_size=2, max_len_b=8))[0]
    assert [h.tokens for h in done[7]] == [h.tokens for h in alone]
