import math

import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, DecodeConfig, TransformerConfig
from aiayn.decoding import beam_search, greedy_search, length_penalty
from aiayn.decoding.beam import top_candidates
from aiayn.decoding.common import max_output_length
from aiayn.models.transformer import Transformer

from fake_decoder import A, B_, C, D, E, FakeModel

SRC = torch.tensor([[A, EOS_ID]])  # 2 source tokens: with a = 0, b = 4 the limit is 4 tokens

# Step 0: a .6, b .4.  Step 1: from a: EOS .4, a .35, b .25; from b: EOS .9, a .1.
TABLE = {(): {A: 0.6, B_: 0.4}, (A,): {EOS_ID: 0.4, A: 0.35, B_: 0.25}, (B_,): {EOS_ID: 0.9, A: 0.1}}


def run(table, alpha, form="gnmt", beam=2, nbest=2, limit=4):
    model = FakeModel(table)
    cfg = DecodeConfig(beam_size=beam, nbest=nbest, length_penalty=alpha, length_penalty_form=form,
                       max_len_a=0.0, max_len_b=limit)
    hyps = beam_search(model, SRC, cfg)[0]
    return [(h.tokens, h.score) for h in hyps], model.calls


def test_length_penalty_forms():
    assert float(length_penalty(3, 0.6, "gnmt")) == pytest.approx((8 / 6) ** 0.6)
    assert float(length_penalty(3, 0.6, "plain")) == pytest.approx(3**0.6)
    assert float(length_penalty(7, 0.0, "gnmt")) == 1.0
    with pytest.raises(ValueError):
        length_penalty(3, 0.6, "other")


def test_no_penalty_exact_hypotheses_and_early_stop():
    # After step 1 both EOS candidates rank first: [b] .36 and [a] .24 finish. The best live
    # beam (a a, .21) cannot beat .24, so the search stops after 2 decoder calls, not 4.
    hyps, calls = run(TABLE, alpha=0.0)
    assert [h[0] for h in hyps] == [[B_], [A]]
    assert [h[1] for h in hyps] == pytest.approx([math.log(0.36), math.log(0.24)])
    assert calls == 2


def test_plain_penalty_counts_eos_and_prefers_longer():
    # lp = |Y| (α = 1), |Y| counting EOS. Step 1 finishes [b] log .36 / 2 and [a] log .24 / 2;
    # the live (a a) has bound log .21 / lp(4) > log .24 / 2, so the search continues and
    # [a a] (log .21 / 3) overtakes [a].
    hyps, calls = run(TABLE, alpha=1.0, form="plain")
    assert [h[0] for h in hyps] == [[B_], [A, A]]
    assert [h[1] for h in hyps] == pytest.approx([math.log(0.36) / 2, math.log(0.21) / 3])
    assert calls == 3


def test_gnmt_penalty_exact_scores():
    lp = lambda n: ((5 + n) / 6) ** 0.6  # noqa: E731
    hyps, calls = run(TABLE, alpha=0.6)
    assert [h[0] for h in hyps] == [[B_], [A]]
    assert [h[1] for h in hyps] == pytest.approx([math.log(0.36) / lp(2), math.log(0.24) / lp(2)])
    # the bound log .21 / lp(4) = -1.22 beats log .24 / lp(2) = -1.30: one more step runs
    assert calls == 3


def test_bound_uses_the_length_limit_and_limit_ends_hypotheses():
    # [a] EOS finishes first (log .3 / 2); a bound at the current length would stop there.
    # The longest chain reaches the 4-token limit without EOS and wins: log .324 / 4.
    table = {(): {A: 1.0}, (A,): {C: 0.45, EOS_ID: 0.3, B_: 0.25},
             (A, C): {D: 0.9, EOS_ID: 0.1}, (A, C, D): {E: 0.8, EOS_ID: 0.2}}
    hyps, calls = run(table, alpha=1.0, form="plain", nbest=2)
    assert [h[0] for h in hyps] == [[A, C, D, E], [A, B_]]
    assert [h[1] for h in hyps] == pytest.approx([math.log(0.324) / 4, math.log(0.25) / 3])
    assert calls == 4


def test_nbest_one_and_log_prob():
    model = FakeModel(TABLE)
    cfg = DecodeConfig(beam_size=2, nbest=1, length_penalty=0.6, max_len_a=0.0, max_len_b=4)
    (h,) = beam_search(model, SRC, cfg)[0]
    assert h.tokens == [B_] and h.log_prob == pytest.approx(math.log(0.36))


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=20, **overrides)).eval()


def sources():
    src = torch.randint(4, 20, (4, 7))
    src[:, -1] = EOS_ID
    src[1, 4:] = 0
    src[1, 3] = EOS_ID
    src[3, 2:] = 0
    src[3, 1] = EOS_ID
    return src


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}])
@pytest.mark.parametrize("fast", [False, True])
def test_beam_one_is_greedy(overrides, fast, device):
    model, src = tiny(**overrides).to(device), sources().to(device)
    model = model.fast_decoder() if fast else model
    cfg = DecodeConfig(beam_size=1, length_penalty=0.0, max_len_a=1.0, max_len_b=5)
    beam = [h[0].tokens for h in beam_search(model, src, cfg)]
    assert beam == greedy_search(model, src, 1.0, 5)


def reference_beam(model, src_row, cfg: DecodeConfig):
    """One sentence, no cache: the whole prefix is re-run through `model(src, prefix)` each step."""
    src = src_row[src_row != PAD_ID][None]  # (1, S) unpadded
    limit = int(max_output_length(torch.tensor([src.shape[1]]), cfg.max_len_a, cfg.max_len_b)[0])
    lp = lambda n: float(length_penalty(n, cfg.length_penalty, cfg.length_penalty_form))  # noqa: E731
    K = cfg.beam_size
    live, finished = [([], 0.0)], []
    for t in range(limit):
        cands = []
        for tokens, score in live:
            prefix = torch.tensor([[BOS_ID] + tokens], device=src.device)
            with torch.no_grad():
                logp = torch.log_softmax(model(src, prefix)[0, -1].float(), -1)[None]
            logp[:, [PAD_ID, BOS_ID]] = float("-inf")  # never outputs
            logp = logp[0]
            cands += [(score + float(lp_), tokens, tok) for tok, lp_ in enumerate(logp.tolist())]
        cands.sort(key=lambda x: -x[0])
        cands = [x for x in cands[: 2 * K] if x[0] > float("-inf")]
        for s, tokens, tok in cands[:K]:
            if tok == EOS_ID or t + 1 >= limit:
                finished.append((tokens + ([] if tok == EOS_ID else [tok]), s / lp(t + 1)))
        live = [(tokens + [tok], s) for s, tokens, tok in cands if tok != EOS_ID][:K]
        if t + 1 >= limit:
            break
        kept = sorted((f[1] for f in finished), reverse=True)
        if len(kept) >= cfg.nbest and live[0][1] / lp(limit) <= kept[cfg.nbest - 1]:
            break
    return sorted(finished, key=lambda x: -x[1])[: cfg.nbest]


@pytest.mark.parametrize("form,alpha", [("gnmt", 0.6), ("plain", 1.0), ("gnmt", 0.0)])
@pytest.mark.parametrize("fast", [False, True])
def test_cached_beam_equals_uncached_reference(form, alpha, fast, device):
    model, src = tiny().to(device), sources().to(device)
    cfg = DecodeConfig(beam_size=3, nbest=3, length_penalty=alpha, length_penalty_form=form, max_len_b=6)
    got = beam_search(model.fast_decoder() if fast else model, src, cfg)
    for i in range(src.shape[0]):
        ref = reference_beam(model, src[i], cfg)
        assert [h.tokens for h in got[i]] == [r[0] for r in ref]
        assert [h.score for h in got[i]] == pytest.approx([r[1] for r in ref], abs=1e-4)


def test_results_do_not_depend_on_batch_composition():
    model, src = tiny(), sources()
    cfg = DecodeConfig(beam_size=3, nbest=2, max_len_b=6)
    batched = beam_search(model, src, cfg)
    for i in range(src.shape[0]):
        row = src[i : i + 1, : int((src[i] != 0).sum())]  # alone, without padding
        alone = beam_search(model, row, cfg)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-5)
        assert greedy_search(model, row, 1.0, 6)[0] == greedy_search(model, src, 1.0, 6)[i]


def test_min_len_and_learned_position_limit():
    model = tiny(positional="learned", max_positions=8)
    src = sources()
    cfg = DecodeConfig(beam_size=2, max_len_b=50, min_len=20)
    out = beam_search(model, src, cfg)
    assert all(len(h[0].tokens) == 8 for h in out)  # EOS forbidden; 8 is the table end
    assert all(len(g) == 8 for g in greedy_search(model, src, min_len=20))


@pytest.mark.parametrize("shape, n", [((3, 4, 50), 8), ((2, 4, 3), 8), ((1, 1, 7), 2)])
def test_top_candidates_are_the_best_over_every_beam_and_token(shape, n):
    """Two stages (each beam's n best, then the best of those) pick what one topk over K·V picks."""
    cand = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    scores, flat = top_candidates(cand, n)
    want_scores, want_flat = cand.view(shape[0], -1).topk(n, dim=1)
    assert torch.equal(scores, want_scores) and torch.equal(flat, want_flat)
