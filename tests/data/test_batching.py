from __future__ import annotations

import numpy as np
import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data.batching import TokenBucketSampler, collate, padding_efficiency, random_batches


def lengths(n=500, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 1, None)
    return src, tgt


def cost(batch, src, tgt):
    return len(batch) * (src[batch].max() + tgt[batch].max())


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("max_tokens", [130, 1000])
def test_every_example_once_per_epoch_across_ranks(world_size, max_tokens):
    src, tgt = lengths()
    samplers = [TokenBucketSampler(src, tgt, max_tokens, seed=3, rank=r, world_size=world_size)
                for r in range(world_size)]
    for epoch in range(3):
        per_rank = [s.batches(epoch) for s in samplers]
        assert len({len(b) for b in per_rank}) == 1  # equal batch counts (DDP)
        seen = sorted(i for batches in per_rank for b in batches for i in b)
        assert seen == list(range(len(src)))
        for batches in per_rank:
            assert all(cost(b, src, tgt) <= max_tokens for b in batches)


def test_deterministic_and_epoch_dependent():
    src, tgt = lengths()
    a = TokenBucketSampler(src, tgt, 500, seed=1)
    b = TokenBucketSampler(src, tgt, 500, seed=1)
    assert a.batches(4) == b.batches(4)
    assert a.batches(4) != a.batches(5)
    assert a.batches(4) != TokenBucketSampler(src, tgt, 500, seed=2).batches(4)
    b.set_epoch(4)
    assert list(b) == a.batches(4) and len(b) == len(a.batches(4))


def test_no_shuffle_is_length_sorted():
    src, tgt = lengths(100)
    batches = TokenBucketSampler(src, tgt, 300, shuffle=False).batches(0)
    flat = [i for b in batches for i in b]
    assert [(src[i], tgt[i]) for i in flat] == sorted((src[i], tgt[i]) for i in range(100))


def test_overlong_example_error_or_skip():
    src, tgt = np.array([3, 50, 4, 5]), np.array([3, 60, 4, 5])
    with pytest.raises(ValueError, match=r"example 1 alone needs 110 tokens .* > max_tokens 100"):
        TokenBucketSampler(src, tgt, 100)
    s = TokenBucketSampler(src, tgt, 100, skip_overlong=True)
    assert s.n_skipped == 1
    assert sorted(i for b in s.batches(0) for i in b) == [0, 2, 3]


def test_bad_arguments():
    with pytest.raises(ValueError, match="rank"):
        TokenBucketSampler([1], [1], 10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="equal length"):
        TokenBucketSampler([1, 2], [1], 10)
    with pytest.raises(ValueError, match="cannot fill 4 ranks"):
        TokenBucketSampler([1, 2], [1, 2], 10, world_size=4)


def test_single_example_batches_that_do_not_divide_among_ranks_leave_the_last_out_of_the_epoch(caplog):
    """Each example a batch (max_tokens fits one), 3 batches, 2 ranks: the epoch gives each rank one batch and
    says so, where it had raised, at an epoch the shuffle happened to bring."""
    import logging

    samplers = [TokenBucketSampler([1, 1, 10], [1, 1, 10], 39, rank=r, world_size=2, sort_by_length=False)
                for r in range(2)]
    with caplog.at_level(logging.WARNING):
        for epoch in range(12):
            shards = [s.batches(epoch) for s in samplers]
            assert [len(b) for b in shards] == [1, 1]
            assert not set(shards[0][0]) & set(shards[1][0])
    assert "3 single-example batches do not divide among 2 processes: 1 are left out" in caplog.text


def test_the_examples_left_out_for_the_ranks_change_from_epoch_to_epoch():
    """Sorted by length, the batches left out were always the last: the longest examples, every epoch."""
    samplers = [TokenBucketSampler([2, 3, 4, 2, 3], [1] * 5, 5, rank=r, world_size=2) for r in range(2)]  # one a batch
    left_out = set()
    for epoch in range(20):
        seen = {i for s in samplers for batch in s.batches(epoch) for i in batch}
        assert len(seen) == 4
        left_out |= set(range(5)) - seen
    assert len(left_out) > 1  # not the one longest example (index 2) each time


def test_padding_efficiency_hand_computed():
    src, tgt = np.array([2, 4, 3]), np.array([1, 1, 5])
    # batch [0,1]: real 2+4+1+1=8, padded 2*(4+1)=10; batch [2]: 8 / 8
    assert padding_efficiency([[0, 1], [2]], src, tgt) == pytest.approx(16 / 18)
    assert padding_efficiency([[0], [1], [2]], src, tgt) == 1.0


def test_bucketing_beats_random():
    src, tgt = lengths(2000)
    batches = TokenBucketSampler(src, tgt, 2000).batches(0)
    rand = random_batches(len(src), [len(b) for b in batches])
    assert sorted(i for b in rand for i in b) == list(range(len(src)))
    assert padding_efficiency(batches, src, tgt) > 0.9 > padding_efficiency(rand, src, tgt)


def test_collate_hand_built():
    b = collate([([5, 6, 7], [8]), ([9], [10, 11, 12])])
    P, S, E = PAD_ID, BOS_ID, EOS_ID
    assert b.src.tolist() == [[5, 6, 7, E], [9, E, P, P]]
    assert b.tgt_in.tolist() == [[S, 8, P, P], [S, 10, 11, 12]]
    assert b.tgt_out.tolist() == [[8, E, P, P], [10, 11, 12, E]]
    assert b.src.dtype == torch.long and (b.n_src_tokens, b.n_tgt_tokens) == (6, 6)
    assert b.n_tgt_tokens == int((b.tgt_out != P).sum())
    with pytest.raises(ValueError):
        collate([])
