import math

import pytest
import torch

from aiayn.config import EOS_ID
from aiayn.decoding import beam_search, greedy_search
from aiayn.config import DecodeConfig

from fake_decoder import A, B_, C, FakeModel, PrefixState


class SourceState(PrefixState):
    """The prefix plus each row's first source token, both following every reorder."""

    def __init__(self, prefix, first):
        super().__init__(prefix)
        self.first = first  # (N,)

    def reorder(self, indices):
        return SourceState(self.prefix.index_select(0, indices), self.first.index_select(0, indices))


class EndsBySource(FakeModel):
    """Emits A until the output has (first source token - 3) tokens, then EOS."""

    def start(self, src, capacity=64):
        return SourceState(torch.empty(src.shape[0], 0, dtype=torch.long), src[:, 0].clone())

    def step(self, tokens, state):
        self.calls += 1
        state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)
        n_out = state.prefix.shape[1] - 1  # tokens produced so far (BOS excluded)
        done = state.first - 3 <= n_out  # (N,)
        logits = torch.full((len(tokens), self.vocab), float("-inf"))
        logits[:, A] = 0.0
        logits[done, A] = float("-inf")
        logits[done, EOS_ID] = 0.0
        return logits


def test_greedy_through_the_interface_exact():
    """The most probable token at each step, from hand-set probabilities: a, then b (.5 > .3), then EOS."""
    model = FakeModel({(): {A: 0.6, B_: 0.4}, (A,): {B_: 0.5, C: 0.3, EOS_ID: 0.2}})
    assert greedy_search(model, torch.tensor([[A, EOS_ID]]), 1.0, 10) == [[A, B_]]
    assert model.calls <= 8  # rows are checked for EOS every 8 steps (one host sync per 8)


def test_beam_through_the_interface_exact():
    """Beam 2 keeps the runner-up and finds the more probable whole output (b EOS: .36 > a EOS .24)."""
    model = FakeModel({(): {A: 0.6, B_: 0.4}, (A,): {EOS_ID: 0.4, A: 0.35, B_: 0.25}, (B_,): {EOS_ID: 0.9, A: 0.1}})
    cfg = DecodeConfig(beam_size=2, nbest=2, length_penalty=0.0, max_len_a=0.0, max_len_b=4)
    hyps = beam_search(model, torch.tensor([[A, EOS_ID]]), cfg)[0]
    assert [h.tokens for h in hyps] == [[B_], [A]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.36), math.log(0.24)])
    assert greedy_search(model, torch.tensor([[A, EOS_ID]]), 0.0, 4) == [[A]]  # greedy takes a, then EOS


def test_model_bound_on_output_length():
    model = FakeModel({}, max_output_length=2)
    model.table = {(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}}
    assert greedy_search(model, torch.tensor([[A, EOS_ID]]), 1.0, 50) == [[A, A]]


def test_rows_that_finish_leave_the_batch_without_changing_results():
    model = EndsBySource({}, vocab=24)
    firsts = torch.arange(4, 20)[torch.randperm(16)]
    src = torch.stack([firsts, torch.full((16,), EOS_ID)], 1)  # (16, 2)
    out = greedy_search(model, src, max_len_a=1.0, max_len_b=30)
    assert out == [[A] * (int(f) - 3) for f in firsts]
    assert model.calls < 30  # stopped once every row ended


def test_length_limit_without_eos():
    model = FakeModel({(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}, (A, A, A): {A: 1.0}})
    src = torch.tensor([[A, EOS_ID], [A, 0]])  # 2 and 1 source tokens
    assert greedy_search(model, src, max_len_a=1.0, max_len_b=1) == [[A, A, A], [A, A]]


def test_the_output_limit_is_the_decimal_product():
    """a·|src| + b in float32 came one short for decimal settings: 1.05 · 100 gave 104, 1.3 · 90 + 5 gave 121."""
    from fractions import Fraction

    from aiayn.decoding.common import max_output_length

    for a in ("1.05", "1.3", "0.7", "1.1", "2.35"):
        for b in (0, 5):
            n = torch.arange(1, 1025)
            want = [max(1, int(Fraction(a) * k + b)) for k in n.tolist()]  # exact: a as the decimal written
            assert max_output_length(n, float(a), b).tolist() == want, a


def test_an_empty_batch_decodes_to_nothing():
    """`pad_sources([])` is a (0, 1) batch: every search failed in `limits.max()` of no rows."""
    from aiayn.config import PAD_ID, SamplingConfig, TransformerConfig
    from aiayn.decoding import sample
    from aiayn.decoding.common import pad_sources
    from aiayn.models import Transformer

    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=12)).eval()
    src = pad_sources([], PAD_ID)
    assert greedy_search(model, src) == [] and beam_search(model, src) == []
    assert sample(model, src, SamplingConfig()) == []
