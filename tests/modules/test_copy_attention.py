"""Copy attention (pointer-generator): the mixture against a reference computed one position at a
time, its configuration error, and a learning check on the copy task. Cached vs uncached steps,
the fast decoder, beams sharing a source, padding and continuous batching are checked with the
other model variants (tests/models, tests/decoding)."""

import math

import pytest
import torch

from aiayn.config import PAD_ID, ConfigError, TransformerConfig
from aiayn.models.transformer import Transformer

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


def test_needs_a_joint_vocabulary():
    with pytest.raises(ConfigError, match="copy_attention needs a joint vocabulary"):
        TransformerConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=30, copy_attention=True)


def test_learns_to_copy():
    """The copy task: 100% exact match on held-out sequences, greedy."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, copy_attention=True, dropout=0.0,
                                                 d_model=64, n_heads=4, d_ff=128))
    expected, got = train_and_copy(model, V, steps=300)
    assert got == expected
