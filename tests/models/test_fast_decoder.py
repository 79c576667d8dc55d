import pytest
import torch

from aiayn.config import TransformerConfig
from aiayn.decoding import for_inference
from aiayn.models import Transformer
from aiayn.models.fast_decoder import FastDecoder
from aiayn.modules.layers import DecoderLayer

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
def test_fast_step_equals_model_step(overrides):
    model, src = tiny(**overrides), sources()
    tgt = torch.randint(4, model.config.tgt_vocab_size, (3, 6))
    ref_state, fast_state = model.start(src, capacity=2), model.start(src, capacity=2)
    fast = model.fast_decoder()
    for t in range(tgt.shape[1]):
        ref = model.step(tgt[:, t], ref_state)
        got = fast.step(tgt[:, t], fast_state)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        if t == 2:  # follow a reordering, as beam search does
            rows = torch.tensor([1, 0, 0])
            ref_state, fast_state, tgt = ref_state.reorder(rows), fast_state.reorder(rows), tgt[rows]


def test_explicit_object_follows_the_weights_it_was_built_from():
    """No hidden memo: a FastDecoder keeps the weights it was built with; a new one sees new weights."""
    model, src = tiny(), sources()
    before = model.fast_decoder()
    with torch.no_grad():
        model.decoder.layers[0].ff.linear1.weight.mul_(2.0)  # as an optimizer step would
    after = model.fast_decoder()
    tokens = torch.ones(3, dtype=torch.long)
    with torch.inference_mode():
        ref = model.step(tokens, model.start(src))
        torch.testing.assert_close(after.step(tokens, model.start(src)), ref)
        assert not torch.allclose(before.step(tokens, model.start(src)), ref)


class GeluLayer(DecoderLayer):
    pass


def test_refuses_other_layers_and_training_mode():
    with pytest.raises(ValueError, match="model.eval"):
        FastDecoder(tiny().train())
    model = tiny()
    model.decoder.layers[0].__class__ = GeluLayer  # a subclass may compute other math
    with pytest.raises(ValueError, match="GeluLayer"):
        FastDecoder(model)
    assert for_inference(model) is model  # decoded with its own step instead
    assert isinstance(for_inference(tiny()), FastDecoder)
    assert for_inference(tiny().train()).training


@torch.inference_mode()
def test_state_reorder_in_place_equals_reorder():
    """`KVCache.reorder_` (beams of one sentence) gives the same next step as `reorder`."""
    model = tiny()
    src = torch.randint(4, V, (2, 5)).repeat_interleave(3, dim=0)  # 2 sentences x 3 beams
    tgt = torch.randint(4, V, (6, 4))
    cache = model.init_cache(model.encode(src), capacity=8)
    model.decode(tgt[:, :3], cache)
    rows = torch.tensor([2, 2, 0, 4, 3, 3])  # each row stays inside its sentence
    expected = model.decode(tgt[rows, 3:4], cache.reorder(rows)).logits
    cross_k = cache.cross_k[0]
    got = model.decode(tgt[rows, 3:4], cache.reorder_(rows)).logits
    torch.testing.assert_close(got, expected)
    assert cache.cross_k[0] is cross_k and cache.length == 4
