import pytest
import torch

from aiayn.config import TransformerConfig
from aiayn.decoding.incremental import IncrementalDecoder, decode_step, incremental_decoder
from aiayn.model import Transformer

V = 24


def tiny(**overrides) -> Transformer:
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, **overrides)).eval()


def sources():
    src = torch.randint(4, V, (3, 7))
    src[1, 4:] = 0
    src[2, :] = 0  # a sentence with no source token at all: zeros from cross-attention, no NaN
    return src


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned"},
                                       {"tgt_vocab_size": 30, "tie_output": False}])
@torch.inference_mode()
def test_fast_step_equals_model_decode(overrides):
    model, src = tiny(**overrides), sources()
    tgt = torch.randint(4, model.config.tgt_vocab_size, (3, 6))
    enc = model.encode(src)
    ref_cache, fast_cache = model.init_cache(enc, capacity=2), model.init_cache(enc, capacity=2)
    fast = IncrementalDecoder(model)
    for t in range(tgt.shape[1]):
        ref = model.decode(tgt[:, t : t + 1], ref_cache).logits[:, 0]
        got = fast.step(tgt[:, t], fast_cache)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        if t == 2:  # follow a reordering, as beam search does
            rows = torch.tensor([1, 0, 0])
            ref_cache, fast_cache, tgt = ref_cache.reorder(rows), fast_cache.reorder(rows), tgt[rows]


def test_rebuilt_after_weights_change_and_skipped_in_training():
    model, src = tiny(), sources()
    first = incremental_decoder(model)
    assert incremental_decoder(model) is first
    with torch.no_grad():
        model.decoder.layers[0].ff.linear1.weight.mul_(2.0)  # as an optimizer step would
    second = incremental_decoder(model)
    assert second is not first
    with torch.inference_mode():
        cache = model.init_cache(model.encode(src))
        ref = model.decode(torch.ones(3, 1, dtype=torch.long), model.init_cache(model.encode(src))).logits[:, 0]
        torch.testing.assert_close(decode_step(model, second, torch.ones(3, dtype=torch.long), cache), ref)
    assert incremental_decoder(model.train()) is None


def test_models_built_under_inference_mode_are_never_cached():
    with torch.inference_mode():
        model = tiny()
    assert incremental_decoder(model) is not incremental_decoder(model)


@torch.inference_mode()
def test_cache_reorder_self_in_place_equals_reorder():
    """`KVCache.reorder_self_` (beams of one sentence) gives the same next step as `reorder`."""
    model = tiny()
    src = torch.randint(4, V, (2, 5)).repeat_interleave(3, dim=0)  # 2 sentences x 3 beams
    tgt = torch.randint(4, V, (6, 4))
    cache = model.init_cache(model.encode(src), capacity=8)
    model.decode(tgt[:, :3], cache)
    rows = torch.tensor([2, 2, 0, 4, 3, 3])  # each row stays inside its sentence
    expected = model.decode(tgt[rows, 3:4], cache.reorder(rows)).logits
    cross_k = cache.cross_k[0]
    got = model.decode(tgt[rows, 3:4], cache.reorder_self_(rows)).logits
    torch.testing.assert_close(got, expected)
    assert cache.cross_k[0] is cross_k and cache.length == 4
