"""Copy attention (pointer-generator): the mixture against a reference computed one position at a
time, its configuration error, and a learning check on the copy task. Cached vs uncached steps,
the fast decoder, beams sharing a source, padding and continuous batching are checked with the
other model variants (tests/models, tests/decoding)."""

import math

import pytest
import torch

from aiayn.config import PAD_ID, ConfigError, TransformerConfig
from aiayn.models.transformer import Transformer
from aiayn.modules.copy_attention import copy_mixture

from copy_task import train_and_copy

V = 24


def tiny(**overrides) -> Transformer:
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, copy_attention=True, **overrides)).eval()


def reference(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """p(w) = g·softmax(logits)(w) + (1 − g)·Σ_{i: src_i = w} a_i, position by position, with the
    attention a over the real source tokens done by hand. -> (B, T, V) probabilities."""
    enc = model.encode(src)
    hidden, _, _ = model.decoder(tgt, model.init_cache(enc, capacity=tgt.shape[1]))
    vocab = torch.softmax(model.project(hidden), dim=-1)
    copy, D = model.copy, model.config.d_model
    out = torch.zeros(*tgt.shape, V)
    for b in range(src.shape[0]):
        real = [i for i in range(src.shape[1]) if src[b, i] != PAD_ID]
        keys = copy.key(enc.memory[b])  # (S, D)
        for t in range(tgt.shape[1]):
            h = hidden[b, t]
            g = torch.sigmoid(copy.gate(h))[0]
            out[b, t] = g * vocab[b, t]
            if not real:
                continue
            scores = torch.stack([keys[i] @ copy.query(h) / math.sqrt(D) for i in real])
            for a, i in zip(torch.softmax(scores, 0), real):
                out[b, t, src[b, i]] += (1 - g) * a
    return out


@torch.no_grad()
def test_mixture_equals_a_position_by_position_reference():
    torch.manual_seed(0)
    model = tiny()
    torch.nn.init.normal_(model.copy.gate.weight, std=1.0)  # a gate that varies with the position
    src = torch.randint(4, V, (3, 7))
    src[0, 2] = src[0, 5]  # a token twice in a source: its attention adds up
    src[1, 4:] = PAD_ID
    src[2, :] = PAD_ID  # no source token: nothing to copy, no NaN
    tgt = torch.randint(4, V, (3, 5))
    got = model(src, tgt).exp()
    torch.testing.assert_close(got, reference(model, src, tgt), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got[:2].sum(-1), torch.ones(2, 5))  # a distribution where there is a source
    assert model.copy.gate.weight.abs().sum() > 0 and (got[0] > 0).all()


def sparse_mixture(logits, gate, a, src):
    """The module's way: the copy term only at the source ids. a (K, T, S), src (K, S)."""
    return copy_mixture(logits, torch.sigmoid(gate), a, src)


def dense_mixture(logits, gate, a, src):
    """log(g·softmax + (1 − g)·copy) with the copy distribution spread over the whole vocabulary."""
    copied = torch.zeros_like(logits).scatter_add(-1, src[:, None, :].expand_as(a), a)  # (K, T, V)
    g = torch.sigmoid(gate)
    return (g * torch.softmax(logits, -1) + (1 - g) * copied).log()


def mixture_inputs(pad: bool = True):
    torch.manual_seed(0)
    K, T, S = 3, 4, 6
    src = torch.randint(4, V, (K, S))
    src[0, 1] = src[0, 4] = src[0, 5]  # an id three times in a source
    if pad:  # padding: no attention there
        src[1, 3:] = PAD_ID
    a = torch.softmax(torch.randn(K, T, S, dtype=torch.float64), -1).masked_fill(src[:, None, :] == PAD_ID, 0.0)
    logits = torch.randn(K, T, V, dtype=torch.float64) * 3
    gate = torch.randn(K, T, 1, dtype=torch.float64) * 2
    return [t.requires_grad_() for t in (logits, gate, a)], src


def test_sparse_mixture_and_its_gradient_equal_the_dense_one():
    (logits, gate, a), src = mixture_inputs()
    weights = torch.randn(*logits.shape, dtype=torch.float64)  # a loss that reads every output
    got, want = sparse_mixture(logits, gate, a, src), dense_mixture(logits, gate, a, src)
    torch.testing.assert_close(got, want)
    got_grads = torch.autograd.grad((got * weights).sum(), (logits, gate, a))
    want_grads = torch.autograd.grad((want * weights).sum(), (logits, gate, a))
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)


def test_sparse_mixture_passes_gradcheck():
    (logits, gate, a), src = mixture_inputs(pad=False)  # no a = 0, where a finite difference leaves the simplex
    assert torch.autograd.gradcheck(lambda *x: sparse_mixture(*x, src), (logits, gate, a))


def test_mixture_under_bf16_autocast_is_float32_and_close():
    torch.manual_seed(0)
    model = tiny()
    src, tgt = torch.randint(4, V, (2, 7)), torch.randint(4, V, (2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(src, tgt)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low.exp().sum(-1), torch.ones(2, 5))
    torch.testing.assert_close(low, model(src, tgt), atol=0.1, rtol=0.05)


def test_needs_a_joint_vocabulary():
    with pytest.raises(ConfigError, match="copy_attention needs a joint vocabulary"):
        TransformerConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=30, copy_attention=True)


@pytest.mark.slow  # a learning check of 15-20 s on 2 cores
def test_learns_to_copy():
    """The copy task: 100% exact match on held-out sequences, greedy."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, copy_attention=True, dropout=0.0,
                                                 d_model=64, n_heads=4, d_ff=128))
    expected, got = train_and_copy(model, V, steps=300)
    assert got == expected


@torch.no_grad()
def test_copy_scores_are_scaled_before_the_product_so_fp16_does_not_overflow():
    """Queries and keys whose dot product passes fp16's 65,504 (its scaled value does not): the copy
    attention scales the queries first, so its weights stay finite and still sum to 1."""
    model = tiny()
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 5]])
    cache = model.init_cache(model.encode(src), capacity=2)
    D = model.config.d_model
    cache.copy_k = torch.full_like(cache.copy_k, 50.0).half()
    copy = model.copy.half()
    copy.query.weight.zero_()
    copy.query.bias.fill_(50.0)  # q = 50 everywhere: q·k = D · 2500 > 65,504 (D = 32)
    assert D * 2500 > 65504
    a = copy.weights(torch.zeros(1, 2, D, dtype=torch.float16), cache)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
