"""FastDecoder's other paths: the batched attention of many rows, and decoding in int8 and bf16.

int8 is checked against its own dequantized reference: the same FastDecoder with every int8 linear
layer replaced by fp32 arithmetic on its dequantized weights (`Int8Linear.dequantized_weight`),
so the only difference left is the per-row quantization of the activations. A learning check then
decodes a trained copy-task model: a broken int8 path (all <unk>, say) cannot match fp32 there."""

import random

import pytest
import torch
import torch.nn.functional as F

from aiayn.config import DecodeConfig, TransformerConfig
from aiayn.decoding import beam_search, for_inference, greedy_search
from aiayn.models import Transformer, load_model
from aiayn.models import fast_decoder
from aiayn.models.fast_decoder import FastDecoder
from aiayn.modules.cache_merge import concat
from aiayn.modules.quantized import PACKED_OUT, Int8Linear
from copy_task import _batch, train_and_copy

V = 24


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, **overrides)).eval()


def sources(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (n, 7), generator=g)
    src[1, 4:] = 0
    src[2, :] = 0  # no source token at all: zeros from cross-attention, no NaN
    return src


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"copy_attention": True}])
@torch.inference_mode()
def test_many_rows_take_the_batched_attention_path_and_equal_the_model(overrides):
    """20 sentences x 4 beams (160 row-heads, 40 source-heads: `_attend`'s bmm path) step as the
    model does, through a beam reorder and a join of new rows at other positions (continuous batching)."""
    model, src, K = tiny(**overrides), sources(20), 4
    fast = model.fast_decoder()
    rows = torch.arange(20).repeat_interleave(K)
    refs, got = [model.start(src).reorder(rows)], fast.start(src).reorder(rows)
    tgts = [torch.randint(4, V, (20 * K, 6))]
    for t in range(6):
        out = fast.step(torch.cat([tgt[:, t - 3 * i] for i, tgt in enumerate(tgts)]), got)
        want = torch.cat([model.step(tgt[:, t - 3 * i], ref) for i, (tgt, ref) in enumerate(zip(tgts, refs))])
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        if t == 1:
            moved = torch.arange(20 * K).view(20, K).roll(1, dims=1).reshape(-1)  # every beam moves
            refs[0].reorder_(moved), got.reorder_(moved)
        if t == 2:  # 10 new sentences join at position 0 beside rows at position 3: the model steps them apart
            new = sources(10, seed=1)
            refs.append(model.start(new))
            tgts.append(torch.randint(4, V, (10, 3)))
            got = concat(got, fast.start(new))


def dequantized_reference(decoder: FastDecoder) -> FastDecoder:
    """`decoder` (int8) with each int8 linear layer computed in fp32 on its dequantized weights."""
    def fp32(linear):
        q = linear.__self__ if hasattr(linear, "__self__") else linear
        w, b = q.dequantized_weight(), q.bias
        return lambda x: F.linear(x, w, b)

    for layer in decoder.layers:
        for name in ("qkv", "sa_out", "q", "kv", "ca_out", "ff1", "ff2"):
            setattr(layer, name, fp32(getattr(layer, name)))
    decoder.output.int8 = fp32(decoder.output.int8)
    for module in list(decoder.encoder.modules()):
        for name, child in module.named_children():
            if isinstance(child, Int8Linear):
                setattr(module, name, _Dequantized(child))
    return decoder


class _Dequantized(torch.nn.Module):
    def __init__(self, q: Int8Linear):
        super().__init__()
        self.w, self.b = q.dequantized_weight(), q.bias

    def forward(self, x):
        return F.linear(x, self.w, self.b)


@torch.inference_mode()
def test_int8_steps_equal_the_dequantized_reference_up_to_the_activation_rounding():
    model, src = tiny(), sources(5)
    int8, ref = FastDecoder(model, "int8"), dequantized_reference(FastDecoder(model, "int8"))
    fp32 = FastDecoder(model)
    c8, cr, cf = int8.start(src), ref.start(src), fp32.start(src)
    tokens = torch.randint(4, V, (5,))
    for _ in range(4):
        got, want, full = int8.step(tokens, c8), ref.step(tokens, cr), fp32.step(tokens, cf)
        spread = want.std()
        assert (got - want).abs().max() < 0.05 * spread  # activations rounded to 1/127 of their range
        assert (want - full).abs().max() > 0  # the reference really uses the quantized weights
        assert (got - want).abs().max() > 0  # and the int8 path really quantizes the activations
        tokens = want.argmax(-1)


@pytest.mark.parametrize("overrides", [{}, {"tie_output": False}, {"share_embeddings": False, "tie_output": False}])
@torch.inference_mode()
def test_int8_embeddings_are_the_models_own_tables_within_a_quantization_step(overrides):
    """Source and target tokens read int8 rows of the model's own tables: the output projection's codes where
    it is tied to the target embedding, else each table's own."""
    model = tiny(**overrides)
    int8, tokens = FastDecoder(model, "int8"), torch.arange(V)[None]
    for got, table in ((int8.embed, model.decoder.embed), (int8.encoder.embed, model.encoder.embed)):
        want = table.weight * table.scale  # (V, D)
        step = want.abs().amax(1, keepdim=True) / 127  # one quantization step of each row
        assert ((got(tokens)[0] - want).abs() <= step / 2 + 1e-6).all()


@torch.inference_mode()
def test_int8_hands_back_every_fp32_matrix_of_a_mapped_model_and_nothing_of_one_in_memory(tmp_path, monkeypatch):
    handed_back = []
    monkeypatch.setattr(fast_decoder, "page_out", lambda t: handed_back.append(t.data_ptr()))
    model = tiny(share_embeddings=False, tie_output=False)
    model.save_pretrained(tmp_path)
    FastDecoder(model, "int8")
    assert handed_back == []
    mapped = load_model(tmp_path)
    FastDecoder(mapped, "int8")
    matrices = [m.weight for m in mapped.modules() if isinstance(m, torch.nn.Linear)]
    matrices += [mapped.encoder.embed.weight, mapped.decoder.embed.weight]
    assert {t.data_ptr() for t in matrices} <= set(handed_back)


@torch.inference_mode()
def test_int8_with_a_packed_output_projection_equals_its_dequantized_reference():
    """A vocabulary of PACKED_OUT ids or more: the output projection on oneDNN's packed weights, a step's
    few rows padded, its codes kept as the tied embedding rows."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=PACKED_OUT)).eval()
    int8, ref = FastDecoder(model, "int8"), dequantized_reference(FastDecoder(model, "int8"))
    assert int8.output.int8.rows is not None and (int8.output.int8.packed is not None) == torch.backends.mkldnn.is_available()
    src, tokens = sources(3), torch.randint(4, PACKED_OUT, (3,))
    got, want = int8.step(tokens, int8.start(src)), ref.step(tokens, ref.start(src))
    assert (got - want).abs().max() < 0.05 * want.std()


@torch.inference_mode()
def test_int8_from_a_mapped_file_decodes_as_from_memory_and_leaves_the_weights_as_they_were(tmp_path):
    """Built from a model whose tensors map its file (`load_model`), int8 hands each part's fp32 pages back
    once quantized (`runtime.page_out`): the same steps, and the model still reads its own weights."""
    model = tiny(copy_attention=True)
    model.save_pretrained(tmp_path)
    mapped = load_model(tmp_path)
    assert mapped.mapped and not model.mapped
    src, tokens = sources(3), torch.randint(4, V, (3,))
    a, b = FastDecoder(model, "int8"), FastDecoder(mapped, "int8")
    torch.testing.assert_close(b.step(tokens, b.start(src)), a.step(tokens, a.start(src)), atol=0, rtol=0)
    for (name, p), q in zip(mapped.named_parameters(), model.parameters()):
        assert torch.equal(p, q), name


@torch.inference_mode()
def test_int8_sentence_decodes_the_same_alone_or_batched():
    """Activations are quantized per row, so a sentence's beam search does not depend on its batch: the
    same n-best tokens, scores equal up to fp32 rounding (padding changes the order of some sums)."""
    model = tiny()
    decoder = for_inference(model, "int8")
    src = torch.randint(4, V, (6, 7))
    cfg = DecodeConfig(beam_size=3, max_len_a=0.0, max_len_b=8, nbest=3)
    batched = beam_search(decoder, src, cfg)
    alone = [beam_search(decoder, src[i:i + 1], cfg)[0] for i in range(6)]
    for b, a in zip(batched, alone):
        assert [h.tokens for h in b] == [h.tokens for h in a]
        assert [h.score for h in b] == pytest.approx([h.score for h in a], abs=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
def test_a_rows_step_does_not_depend_on_how_many_rows_share_it(precision):
    """Eight sources of one length: 8 sources x 4 heads reach the size where fp32 attention turns
    to batched matmuls; a sentence's logits are those it gets alone, to float rounding (bf16's batched
    matmuls were 1e-2 off)."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=29, d_model=32, n_heads=4, n_encoder_layers=2,
                                          n_decoder_layers=2, d_ff=64, dropout=0.0)).eval()
    src = torch.randint(4, 29, (8, 6))
    bos = torch.ones(8, dtype=torch.long)
    fast = model.fast_decoder(precision)
    with torch.inference_mode():
        together = fast.step(bos, fast.start(src))
        alone = torch.cat([fast.step(bos[:1], fast.start(src[i:i + 1])) for i in range(8)])
    torch.testing.assert_close(together.float(), alone.float(), rtol=0, atol=1e-5)


def test_a_copy_attention_model_decodes_in_bf16_as_in_fp32():
    """Its copy keys are cached under the encoder's autocast (bf16); its step's queries are fp32. The
    step's log-probabilities are fp32's to bf16's rounding, and beam search runs through."""
    model = tiny(copy_attention=True)
    src = sources(3)
    bos = torch.ones(3, dtype=torch.long)
    with torch.inference_mode():
        steps = [fast.step(bos, fast.start(src)).float() for fast in (model.fast_decoder("fp32"),
                                                                      model.fast_decoder("bf16"))]
    torch.testing.assert_close(steps[1], steps[0], atol=0.05, rtol=0)
    outs = beam_search(for_inference(model, "bf16"), src, DecodeConfig(beam_size=2, max_len_a=0.0, max_len_b=6))
    assert len(outs) == 3 and all(len(h.tokens) <= 6 for hyps in outs for h in hyps)


@pytest.mark.slow
def test_int8_and_bf16_decode_a_trained_copy_model_as_fp32_does():
    """The learning check: a copy-task model decoded in int8 and bf16 copies as it does in fp32."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, dropout=0.0))
    expected, got = train_and_copy(model, V, steps=400)
    fp32_right = sum(e == g for e, g in zip(expected, got))
    assert fp32_right >= 90
    _, src, _, _ = _batch(random.Random(1), 100, V)
    reference = greedy_search(for_inference(model), src, 1.0, 2)
    for precision in ("int8", "bf16"):
        outs = greedy_search(for_inference(model, precision), src, 1.0, 2)
        same = sum(a == b for a, b in zip(outs, reference))
        assert same >= 95, (precision, same)


def test_precisions_a_model_cannot_decode_in_are_errors_except_auto():
    model = tiny()
    model.decoder.layers[0].ff.__class__ = type("Gelu", (model.decoder.layers[0].ff.__class__,), {})
    assert for_inference(model, "auto") is model  # no fast decoder: fp32, the model's own step
    assert for_inference(model) is model
    with pytest.raises(ValueError, match="cannot decode in int8"):
        for_inference(model, "int8")
    with pytest.raises(ValueError, match="precision must be one of"):
        FastDecoder(tiny(), "fp16")


@pytest.mark.parametrize("overrides", [{"activation": "silu", "logits_bias": True}, {"activation": "gelu"},
                                       {"activation": "gelu_tanh", "norm_first": True}])
@torch.inference_mode()
def test_imported_architectures_options_step_as_the_model_does(overrides):
    """The options Hugging Face checkpoints bring (Marian: swish and a final logits bias) in the fast step."""
    model, src = tiny(**overrides), sources(3)
    if model.logits_bias is not None:
        model.logits_bias.normal_()  # zeros at init would hide a missing bias
    fast = model.fast_decoder()
    ref, got = model.start(src), fast.start(src)
    for t in range(4):
        tokens = torch.randint(4, V, (3,))
        torch.testing.assert_close(fast.step(tokens, got), model.step(tokens, ref), atol=1e-5, rtol=1e-5)
