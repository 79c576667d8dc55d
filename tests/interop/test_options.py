"""The model options imported checkpoints bring, on their own: each is validated with an error naming
it, saved with the model, and used by the model's forward and step paths."""

from __future__ import annotations

import pytest
import torch

from aiayn.config import ConfigError, TransformerConfig
from aiayn.interop.marian import permute_residual, residual_permutation
from aiayn.models import EncoderOnlyConfig, Transformer, load_model
from aiayn.modules.embeddings import sinusoid_table


def test_halves_hold_the_interleaved_values_in_another_order():
    for d in (16, 7):
        perm = residual_permutation(d)
        torch.testing.assert_close(sinusoid_table(9, d, layout="halves"), sinusoid_table(9, d)[:, perm], atol=0, rtol=0)


@pytest.mark.parametrize("field, value", [("activation", "tanh"), ("sinusoid_layout", "sideways")])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        TransformerConfig.preset("tiny", src_vocab_size=20, **{field: value})


def test_encoder_only_pooler_needs_cls_pooling():
    with pytest.raises(ConfigError, match="pooler"):
        EncoderOnlyConfig(vocab_size=20, pooler=True, pooling="mean")


def test_options_are_saved_and_used_by_forward_and_step(tmp_path):
    """A permuted residual stream with halves sinusoids is the same function as the interleaved model;
    the logits bias and the activation reach both teacher forcing and the step."""
    cfg = TransformerConfig.preset("tiny", src_vocab_size=30, dropout=0.0, activation="silu", logits_bias=True,
                                   scale_embeddings=False)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.logits_bias.normal_()
    model.save_pretrained(tmp_path / "m")
    assert load_model(tmp_path / "m").config == cfg
    halves = Transformer(TransformerConfig(**{**cfg.to_dict(), "sinusoid_layout": "halves"})).eval()
    halves.load_state_dict(permute_residual(model.state_dict(), residual_permutation(cfg.d_model)))
    src, tgt = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(halves(src, tgt), model(src, tgt), atol=1e-5, rtol=0)
        state = halves.start(src)
        steps = torch.stack([halves.step(tgt[:, t], state) for t in range(4)], 1)
    torch.testing.assert_close(steps, model(src, tgt), atol=1e-5, rtol=0)
    without = Transformer(TransformerConfig(**{**cfg.to_dict(), "logits_bias": False})).eval()
    without.load_state_dict({k: v for k, v in model.state_dict().items() if k != "logits_bias"})
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt) - without(src, tgt), model.logits_bias.expand(2, 4, -1))
