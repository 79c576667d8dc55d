"""`KVCache` declares every field it holds, and every cache, new or derived, is built by its constructor."""

import pytest
import torch

from aiayn.modules.cache import KVCache
from aiayn.modules.cache_merge import concat


def cache(n: int, S: int, padded: bool = False, copies: bool = False) -> KVCache:
    """n sources of length S, one layer, H = 1, Dh = 2; with `padded`, the last source is padded after 1 token."""
    src_mask = torch.ones(n, S, dtype=torch.bool)
    if padded:
        src_mask[-1, 1:] = False
    copy_source = (torch.randn(n, 1, S, 2), torch.randint(4, 9, (n, S))) if copies else None
    return KVCache([(torch.randn(n, 1, S, 2), torch.randn(n, 1, S, 2))], src_mask, 4, copy_source)


def decoded(c: KVCache, steps: int) -> KVCache:
    for _ in range(steps):
        K = c.batch_size
        c.append(0, torch.randn(K, 1, 1, 2), torch.randn(K, 1, 1, 2))
        c.advance(1)
    return c


def fields(c: KVCache) -> dict:
    return {name: getattr(c, name) for name in KVCache.__slots__}  # AttributeError if one was never set


@pytest.mark.parametrize("copies", [False, True])
def test_every_cache_has_every_declared_field_and_no_other(copies):
    a = decoded(cache(2, 3, padded=True, copies=copies), 2)
    beams = decoded(cache(2, 3), 1).reorder(torch.tensor([0, 0, 1, 1]))  # 2 sources x 2 beams
    made = {"new": a, "self_only": KVCache.self_only(2, 3, "cpu"),
            "reorder": a.reorder(torch.tensor([1, 1, 0])),
            "concat": concat(a, cache(1, 5, copies=copies)),
            "reorder_": beams.reorder_(torch.tensor([1, 0, 3, 2]))}
    for how, c in made.items():
        assert not hasattr(c, "__dict__"), how
        assert set(fields(c)) == set(KVCache.__slots__), how
        with pytest.raises(AttributeError):
            c.hidden_memo = {}  # nothing can be hung on a cache beside its declared fields
    assert made["self_only"].self_k == [None, None] and made["self_only"].cross_k == []
    assert (made["concat"].copy_k is None) != copies


def test_concat_shares_the_masks_of_the_sources_it_keeps():
    a = decoded(cache(2, 3, padded=True), 1)
    kept = a.reorder(torch.arange(2))
    assert kept.src_mask is a.src_mask and kept.cross_mask is a.cross_mask and kept.has_source is a.has_source
    assert kept.length == 1 and kept.start is None and kept.group == 1 and kept.capacity >= 2
    joined = concat(a, cache(1, 5))
    assert joined.cross_mask.shape == (3, 1, 1, 5) and joined.cross_mask[0, 0, 0].tolist() == [True] * 3 + [False] * 2


def test_reorder_in_place_swaps_with_its_own_spare_buffers():
    """`reorder_` twice: the second call writes into the buffers the first one left (`_spares`)."""
    c = decoded(cache(1, 3), 2).reorder(torch.zeros(3, dtype=torch.long))  # 1 source, 3 beams
    first = c.self_k[0]
    rows = torch.tensor([2, 0, 1])
    expected = first[rows][rows].clone()
    c.reorder_(rows)
    assert c.self_k[0] is not first and c._spares[("k", 0)] is first
    c.reorder_(rows)
    assert c.self_k[0] is first  # back in the first buffer: no allocation per step
    torch.testing.assert_close(c.self_k[0][:, :, :2], expected[:, :, :2])


@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4, 5], [0, 0, 2, 3, 4, 5], [1, 0, 2, 3, 5, 5], [5, 4, 3, 2, 1, 0],
                                  [0, 0, 0, 1, 1, 1]])
def test_reorder_in_place_equals_a_gather(rows):
    """Few rows moving (gathered and written back in place), many (a full copy) or none: the same
    result as indexing, keys and values, including rows that are read and written in one call."""
    c = decoded(decoded(cache(1, 3), 1).reorder(torch.zeros(6, dtype=torch.long)), 2)  # 1 source, 6 beams
    assert not torch.equal(c.self_k[0][0, :, :3], c.self_k[0][1, :, :3])  # the rows differ
    rows = torch.tensor(rows)
    expected = [c.self_k[0][:, :, :3][rows].clone(), c.self_v[0][:, :, :3][rows].clone()]
    c.reorder_(rows)
    torch.testing.assert_close([c.self_k[0][:, :, :3], c.self_v[0][:, :, :3]], expected)


def test_concat_stacks_a_shared_layers_sources_once():
    """A universal stack's steps share one layer, so one (K, V) pair of the source: dropping a row or adding
    a sentence keeps them one pair, not a copy per step; layers of their own stay apart."""
    k, v = torch.randn(2, 1, 3, 2), torch.randn(2, 1, 3, 2)
    shared = KVCache([(k, v)] * 3, torch.ones(2, 3, dtype=torch.bool), 4)
    new = KVCache([(torch.randn(1, 1, 5, 2), torch.randn(1, 1, 5, 2))] * 3, torch.ones(1, 5, dtype=torch.bool), 4)
    for joined in (concat(shared, rows=torch.tensor([1])), concat(shared, new)):
        assert all(kl is joined.cross_k[0] and vl is joined.cross_v[0] for kl, vl in zip(joined.cross_k, joined.cross_v))
    assert torch.equal(concat(shared, rows=torch.tensor([1])).cross_k[2], k[1:])
    own = KVCache([(torch.randn(2, 1, 3, 2), torch.randn(2, 1, 3, 2)) for _ in range(2)], shared.src_mask, 4)
    apart = concat(own, rows=torch.tensor([1]))
    assert apart.cross_k[0] is not apart.cross_k[1] and torch.equal(apart.cross_k[1], own.cross_k[1][1:])
