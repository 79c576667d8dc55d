"""The encoder-only model (BERT / ViT): its body against torch's TransformerEncoder with copied
weights, bidirectional attention, padding, the heads, and patches as tokens."""

import pytest
import torch
from torch import nn

from aiayn.config import PAD_ID, ConfigError
from aiayn.models import EncoderOnly, EncoderOnlyConfig, load_model
from aiayn.models.encoder_only import CLS_ID

CFG = dict(vocab_size=23, d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0, max_positions=16, n_classes=3)


def model(**overrides) -> EncoderOnly:
    torch.manual_seed(0)
    m = EncoderOnly(EncoderOnlyConfig(**{**CFG, **overrides})).eval()
    for module in m.modules():
        if isinstance(module, nn.LayerNorm):
            nn.init.normal_(module.weight, 1.0, 0.1)
            nn.init.normal_(module.bias, 0.0, 0.1)
    return m


def reference(ours: EncoderOnly) -> nn.TransformerEncoder:
    cfg = ours.config
    layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, batch_first=True,
                                       norm_first=cfg.norm_first)
    ref = nn.TransformerEncoder(layer, cfg.n_layers, norm=ours.final_norm, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for mine, theirs in zip(ours.layers, ref.layers):
            theirs.self_attn.in_proj_weight.copy_(mine.self_attn.in_proj.weight)
            theirs.self_attn.in_proj_bias.copy_(mine.self_attn.in_proj.bias)
            theirs.self_attn.out_proj.load_state_dict(mine.self_attn.out_proj.state_dict())
            theirs.linear1.load_state_dict(mine.ff.linear1.state_dict())
            theirs.linear2.load_state_dict(mine.ff.linear2.state_dict())
            theirs.norm1.load_state_dict(mine.sa_conn.norm.state_dict())
            theirs.norm2.load_state_dict(mine.ff_conn.norm.state_dict())
    return ref


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_body_equals_torch_encoder_with_padding(norm_first, device):
    ours = model(norm_first=norm_first).to(device)
    x = torch.randint(4, 23, (3, 7), device=device)
    x[1, 5:] = PAD_ID
    x[2, 3:] = PAD_ID
    ids = torch.cat([torch.full((3, 1), CLS_ID, device=device), x], dim=1)
    embedded = ours.embed(ids) + ours.positions(ids.shape[1])
    expected = reference(ours).to(device)(embedded, src_key_padding_mask=ids == PAD_ID)
    real = ids != PAD_ID
    torch.testing.assert_close(ours(x)[real], expected[real], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_attention_is_bidirectional_and_ignores_padding():
    m = model()
    x = torch.randint(4, 23, (2, 6))
    changed = x.clone()
    changed[:, -1] = 4 if int(x[0, -1]) != 4 else 5
    assert not torch.allclose(m(x)[:, 1], m(changed)[:, 1])  # a later token changes an earlier state
    for w in m.attention(x):
        assert w.triu(diagonal=1).abs().sum() > 0  # not causal
    padded = torch.cat([x, torch.full((2, 3), PAD_ID)], dim=1)
    torch.testing.assert_close(m.classify(padded), m.classify(x), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_heads_shapes_and_tied_mlm_projection(tmp_path):
    m = model()
    x = torch.randint(4, 12, (2, 5))  # ids 12.. never occur in the input
    logits = m.mlm_logits(x)
    assert logits.shape == (2, 5, 23) and m.classify(x).shape == (2, 3)
    vocab_by_width = [name for name, p in m.named_parameters() if p.shape == (23, 16)]
    assert vocab_by_width == ["embed.weight"]  # no separate output matrix: the projection is the embedding
    m.embed.weight[20] += 1.0  # an embedding row no input token reads changes exactly that output column
    changed = m.mlm_logits(x)
    assert not torch.allclose(changed[..., 20], logits[..., 20])
    others = [i for i in range(23) if i != 20]
    torch.testing.assert_close(changed[..., others], logits[..., others])
    m.save_pretrained(tmp_path)
    torch.testing.assert_close(load_model(tmp_path).classify(x), m.classify(x))
    with pytest.raises(ValueError, match="no classifier head"):
        model(n_classes=0).classify(x)


@torch.no_grad()
def test_patches_as_tokens():
    """ViT §3.1: [CLS], then the projected patches, plus learned positions, through the encoder: against
    torch's encoder with the same weights; the classifier reads [CLS]'s final state."""
    vit = model(input="patches", patch_dim=12, norm_first=True, vocab_size=1)
    patches = torch.randn(2, 4, 12)
    inputs = torch.cat([vit.cls.expand(2, -1, -1), vit.patch_proj(patches)], dim=1) + vit.positions(5)  # (2, 5, D)
    states = reference(vit)(inputs)
    torch.testing.assert_close(vit(patches), states, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(vit.classify(patches), vit.classifier(states[:, 0]), atol=1e-5, rtol=1e-5)
    weights = vit.attention(patches)
    assert weights[0].shape == (2, 4, 5, 5)  # [CLS] + 4 patches
    with pytest.raises(ValueError, match="exceed max_positions"):
        vit(torch.randn(1, 16, 12))


@torch.no_grad()
def test_mlm_logits_at_chosen_positions_equal_the_full_ones():
    m = model()
    x = torch.randint(4, 23, (3, 6))
    chosen = torch.rand(3, 6) < 0.3
    chosen[0, 0] = True
    torch.testing.assert_close(m.mlm_logits(x, chosen), m.mlm_logits(x)[chosen])


@torch.no_grad()
def test_mean_pooling_reads_cls_and_the_real_tokens_only():
    """pooling = "mean": each sentence classified in a padded batch as alone, from the mean of its
    unpadded final states ([CLS] included), and not from [CLS] alone."""
    m = model(pooling="mean")
    x = torch.tensor([[5, 6, 7, 8], [9, 10, PAD_ID, PAD_ID]])
    batched = m.classify(x)
    for i, n in enumerate((4, 2)):
        alone = m(x[i:i + 1, :n])  # (1, 1 + n, D)
        torch.testing.assert_close(batched[i], m.classifier(alone.mean(1))[0], atol=1e-5, rtol=1e-5)
    cls = model(pooling="cls")
    assert not torch.allclose(cls.classify(x), batched)  # the same weights (seed 0), another head input
    with pytest.raises(ConfigError, match="pooling must be 'cls' or 'mean', got 'max'"):
        model(pooling="max")


@pytest.mark.parametrize("bad, message", [
    ({"attention_score": "dott"}, "attention_score must be one of"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ({"attention_dropout": -0.1}, r"attention_dropout must be in \[0, 1\)"),
    ({"layer_norm_eps": 0.0}, "layer_norm_eps must be a finite number > 0"),
    ({"input": "patches", "patch_dim": 12, "positional": "learned", "logits_bias": True}, "MLM head"),
])
def test_config_refuses_what_the_layers_or_heads_cannot_use(bad, message):
    with pytest.raises(ConfigError, match=message):
        EncoderOnlyConfig(**bad)


def test_a_vocabulary_without_room_for_the_special_ids_is_refused():
    """vocab_size 1 built and then failed at the first [CLS] (id 1); a decoder-only model of 2 ids generated
    padding, every other id banned."""
    from aiayn.models import DecoderOnlyConfig

    with pytest.raises(ConfigError, match="vocab_size must hold the 4 special ids, got 1"):
        EncoderOnlyConfig(vocab_size=1)
    with pytest.raises(ConfigError, match="vocab_size must hold the 4 special ids, got 2"):
        DecoderOnlyConfig(vocab_size=2)
    assert EncoderOnlyConfig(vocab_size=1, input="patches", patch_dim=4, positional="learned")  # patches have no vocabulary
