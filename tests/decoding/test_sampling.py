import pytest
import torch

from aiayn.config import EOS_ID, SamplingConfig, TransformerConfig
from aiayn.decoding import filter_logits, greedy_search, sample
from aiayn.decoding.sampling import sampling_probs
from aiayn.models.transformer import Transformer

from fake_decoder import A, B_, C, FakeModel

# Every prefix: a .5, b .3, c .15, EOS .05
DIST = {A: 0.5, B_: 0.3, C: 0.15, EOS_ID: 0.05}


class SameEveryStep(FakeModel):
    def __init__(self):
        super().__init__({})
        self.table = _Always(DIST)


class _Always(dict):
    def __init__(self, dist):
        super().__init__()
        self.dist = dist

    def get(self, key, default=None):
        return self.dist


def test_filter_logits_exact():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3]]))
    kept = lambda top_k=0, top_p=1.0: torch.isfinite(filter_logits(logits, top_k, top_p))[0].tolist()  # noqa: E731
    assert kept(top_k=2) == [False, True, False, True]
    assert kept(top_p=0.7) == [False, True, False, True]  # .5 < .7, .5 + .3 reaches it
    assert kept(top_p=0.5) == [False, True, False, False]  # the top token alone reaches .5
    assert kept(top_p=0.81) == [False, True, True, True]
    assert kept(top_k=3, top_p=0.7) == [False, True, False, True]
    assert kept() == [True] * 4
    with pytest.raises(ValueError):
        filter_logits(logits, 0, 0.0)


@pytest.mark.parametrize("kw,allowed", [({"top_k": 2}, {A, B_}), ({"top_p": 0.7}, {A, B_}), ({"top_p": 0.5}, {A})])
def test_sampling_never_emits_excluded_tokens(kw, allowed):
    model = SameEveryStep()
    src = torch.full((300, 2), A)
    gen = torch.Generator().manual_seed(1)
    out = sample(model, src, SamplingConfig(**kw), generator=gen, max_len_a=0.0, max_len_b=5)
    emitted = {tok for row in out for tok in row}
    assert emitted == allowed  # never an excluded token, and every allowed one shows up


def test_sampling_is_reproducible_and_follows_probabilities():
    model = SameEveryStep()
    src = torch.full((2000, 2), A)
    first = lambda seed: sample(model, src, generator=torch.Generator().manual_seed(seed),  # noqa: E731
                                max_len_a=0.0, max_len_b=1, min_len=1)
    a, b, c = first(3), first(3), first(4)
    assert a == b and a != c
    share = sum(row == [A] for row in a) / len(a)
    assert share == pytest.approx(0.5 / 0.95, abs=0.05)  # EOS is forbidden at step 0 by min_len


def test_low_temperature_and_top_k_one_are_greedy():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=20)).eval()
    src = torch.randint(4, 20, (3, 6))
    greedy = greedy_search(model, src, 1.0, 5)
    assert sample(model, src, SamplingConfig(top_k=1), max_len_b=5, generator=torch.Generator().manual_seed(0)) == greedy
    assert sample(model, src, SamplingConfig(temperature=1e-4, seed=0), max_len_b=5) == greedy
    # below float32's range, 1/T overflows: the limit, greedy search, and no 0/0 (sampling_probs)
    assert sample(model, src, SamplingConfig(temperature=1e-300, seed=0), max_len_b=5) == greedy


def test_sampling_probs_near_zero_temperature_are_one_hot_and_ties_share():
    scores = torch.tensor([[0.5, 3.0, -1.0, float("-inf")], [2.0, 2.0, 1.0, 0.0]])
    probs = sampling_probs(scores, SamplingConfig(temperature=1e-300))
    torch.testing.assert_close(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]]), rtol=0, atol=0)
    warm = sampling_probs(scores, SamplingConfig(temperature=2.0))
    torch.testing.assert_close(warm, (scores / 2.0).softmax(-1))  # moving the best to 0 changes nothing else


def test_seed_in_the_config_makes_sampling_reproducible():
    model, src = SameEveryStep(), torch.full((50, 2), A)
    run = lambda seed: sample(model, src, SamplingConfig(seed=seed), max_len_a=0.0, max_len_b=4)  # noqa: E731
    assert run(7) == run(7) and run(7) != run(8)


def test_a_row_with_its_own_generator_samples_what_it_samples_alone():
    """Rows finish at different steps and leave the batch; each keeps drawing from its own generator."""
    model, src = SameEveryStep(), torch.full((8, 2), A)
    gens = lambda: [torch.Generator().manual_seed(100 + i) for i in range(8)]  # noqa: E731
    together = sample(model, src, generators=gens(), max_len_a=0.0, max_len_b=30)
    assert len({len(row) for row in together}) > 1  # rows end at different steps
    alone = [sample(model, src[i:i + 1], generators=[g], max_len_a=0.0, max_len_b=30)[0]
             for i, g in enumerate(gens())]
    assert alone == together
    with pytest.raises(ValueError, match="one generator per row"):
        sample(model, src, generators=gens()[:3])
