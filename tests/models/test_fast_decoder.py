import pytest
import torch
from torch import Tensor

from aiayn.config import TransformerConfig
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair
from aiayn.decoding import for_inference
from aiayn.decoding.translator import Translator
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
                                       {"tgt_vocab_size": 30, "tie_output": False}, {"copy_attention": True}])
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


def update_in_place(model) -> None:
    """A weight update as an optimizer step makes it, in place: a weight matrix, a bias, a LayerNorm
    weight, the embedding (shared by encoder, decoder and output) and, where the model has them,
    the learned position table and the copy attention."""
    with torch.no_grad():
        model.decoder.layers[0].ff.linear1.weight.mul_(1.5)
        model.decoder.layers[0].ff.linear2.bias.add_(0.5)
        model.decoder.layers[1].ca_conn.norm.weight.mul_(1.5)
        model.decoder.embed.weight.add_(0.1 * torch.randn_like(model.decoder.embed.weight))
        if model.config.positional == "learned":
            model.decoder.positions.weight.add_(0.1)
        if model.copy is not None:
            model.copy.query.bias.add_(0.5)
            model.copy.gate.weight.mul_(-1.0)


@torch.inference_mode()
def decode_steps(decoder, src: Tensor, tgt: Tensor) -> Tensor:
    """Logits (T, B, V) of stepping `decoder` through `tgt` (B, T) from a fresh `start(src)`."""
    state = decoder.start(src)
    return torch.stack([decoder.step(tgt[:, t], state) for t in range(tgt.shape[1])])


@pytest.mark.parametrize("overrides", [{}, {"positional": "learned", "copy_attention": True}])
def test_changed_weights_are_refused_until_rebuilt(overrides):
    """No hidden memo and no mix of old and new weights: once the model's weights change (in place, as
    an optimizer does, or a tensor replaced), a FastDecoder (and a Translator's) refuses to start
    until it is rebuilt, which then decodes with the new weights."""
    model, src = tiny(**overrides), sources()
    assert model.decoder.embed is model.encoder.embed  # one matrix: source, target and output
    tgt = torch.randint(4, V, (3, 5))
    tokenizers = TokenizerPair.shared(SymbolTokenizer([f"s{i}" for i in range(V - 4)]))
    fast, translator = model.fast_decoder(), Translator(model, tokenizers)
    before = decode_steps(fast, src, tgt)
    torch.testing.assert_close(decode_steps(model, src, tgt), before, atol=1e-5, rtol=1e-5)

    update_in_place(model)
    after = decode_steps(model, src, tgt)
    assert not torch.allclose(after, before, atol=1e-3)
    for decoder in (fast, translator.decoder):
        with pytest.raises(ValueError, match="weights changed"):
            decoder.start(src)
    translator.refresh()
    torch.testing.assert_close(decode_steps(translator.decoder, src, tgt), after, atol=1e-5, rtol=1e-5)
    model.encoder.layers[0].ff.linear1.bias = torch.nn.Parameter(torch.ones_like(model.encoder.layers[0].ff.linear1.bias))
    with pytest.raises(ValueError, match="weights changed"):
        translator.decoder.start(src)


def test_reads_the_models_own_tensors_in_fp32_and_no_fp32_copy_in_int8():
    """Memory: fp32 reads the model's tensors, copying none; int8 holds its own int8 copies and no
    reference to the model, so a Translator's fp32 weights can be freed."""
    model = tiny()
    fast = model.fast_decoder()
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    held = [t for layer in fast.layers for t in (*layer.sa_norm, *layer.ca_norm, *layer.ff_norm)] + [fast.output.w]
    assert {t.untyped_storage().data_ptr() for t in held} <= storages
    int8 = model.fast_decoder("int8")
    tensors = (*int8.encoder.named_parameters(), *int8.encoder.named_buffers())
    matrices = [name for name, t in tensors if t.dtype == torch.float32 and t.dim() == 2 and "positions" not in name]
    assert int8.model is None and matrices == []  # the encoder's matrices and embeddings are int8
    linears = [getattr(layer, name).__self__ for layer in int8.layers for name in ("qkv", "q", "kv", "ff2")]
    kept = [t for layer in int8.layers for t in (*layer.sa_norm, *layer.ca_norm, *layer.ff_norm)] + [
        t for m in (int8.encoder, int8.positions, int8.embed, *linears) for t in (*m.parameters(), *m.buffers())] + [
        t for t in vars(int8.output).values() if isinstance(t, torch.Tensor)]
    assert not {t.untyped_storage().data_ptr() for t in kept} & storages  # nothing shares the model's memory


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


def per_row(cache):
    """The same cache with its own copy of the source-side tensors for every row (group 1): the plain
    layout, an independent reference for the grouped one."""
    g = cache.group
    cache.cross_k = [k.repeat_interleave(g, 0) for k in cache.cross_k]
    cache.cross_v = [v.repeat_interleave(g, 0) for v in cache.cross_v]
    cache.src_mask = cache.src_mask.repeat_interleave(g, 0)
    if cache.copy_k is not None:
        cache.copy_k, cache.src_ids = cache.copy_k.repeat_interleave(g, 0), cache.src_ids.repeat_interleave(g, 0)
    cache.cross_mask, cache.has_source = (None if t is None else t.repeat_interleave(g, 0)
                                          for t in (cache.cross_mask, cache.has_source))
    cache.group = 1
    return cache


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"copy_attention": True}])
@torch.inference_mode()
def test_beams_share_their_source_and_step_as_rows_with_their_own_copy(overrides, device):
    """Expanding 3 sentences to 4 beams keeps one copy of each source's cross-attention tensors
    (`KVCache.group`); both steps, and the attention maps, then equal those on a cache with a copy
    per row, through a beam reorder, dropping a sentence, and a reorder that breaks the groups."""
    model, src, K = tiny(**overrides).to(device), sources().to(device), 4
    fast = model.fast_decoder()
    shared = model.start(src)
    cross_k = shared.cross_k[0]
    shared = shared.reorder(torch.arange(3, device=device).repeat_interleave(K))  # as start_beams expands to beams
    assert shared.group == K and shared.batch_size == 3 * K and shared.cross_k[0] is cross_k
    own = per_row(model.start(src).reorder(torch.arange(3, device=device).repeat_interleave(K)))
    shared_fast = shared.reorder(torch.arange(3 * K, device=device))
    assert shared_fast.group == K and shared_fast.cross_k[0] is cross_k
    tgt = torch.randint(4, V, (3 * K, 5), device=device)
    moves = {1: torch.arange(3 * K).view(3, K).flip(1).reshape(-1),  # beams move within their sentence
             2: torch.arange(K, 3 * K),  # sentence 0 ends: whole groups kept
             3: torch.tensor([0, 0, 5, 5, 5, 5])}  # runs of 2 and 4: groups of 2
    for t in range(tgt.shape[1]):
        assert own.group == 1
        maps = t % 2 == 0  # the explicit attention path with its maps, else the fused kernel
        ref = model.decode(tgt[:, t:t + 1], own, need_weights=maps)
        got = model.decode(tgt[:, t:t + 1], shared, need_weights=maps)
        torch.testing.assert_close(got.logits, ref.logits, atol=1e-5, rtol=1e-5)
        for g, r in zip(got.cross_attentions or [], ref.cross_attentions or []):
            torch.testing.assert_close(g, r, atol=1e-6, rtol=1e-5)
        assert (got.cross_attentions is None) != maps
        torch.testing.assert_close(fast.step(tgt[:, t], shared_fast), ref.logits[:, -1], atol=1e-5, rtol=1e-5)
        rows = moves.get(t)
        if rows is None:
            continue
        rows = rows.to(device)
        if t == 1:
            own.reorder_(rows), shared.reorder_(rows), shared_fast.reorder_(rows)
        else:
            own, shared, shared_fast = per_row(own.reorder(rows)), shared.reorder(rows), shared_fast.reorder(rows)
        tgt = tgt[rows]
    assert shared.group == 2 and shared.src_mask.shape[0] == 3 and shared.batch_size == 6
