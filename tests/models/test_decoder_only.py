"""The decoder-only model (GPT): against torch's own layers with copied weights, causal, cached
generation equal to recomputation, and generation through the shared decoding code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.greedy import greedy_search
from aiayn.models import DecoderOnly, DecoderOnlyConfig, load_model
from aiayn.modules import masks

CFG = dict(vocab_size=23, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_positions=24)


def model(**overrides) -> DecoderOnly:
    torch.manual_seed(0)
    m = DecoderOnly(DecoderOnlyConfig(**{**CFG, **overrides})).eval()
    for module in m.modules():  # norms away from (1, 0), so a missing or misplaced norm shows
        if isinstance(module, nn.LayerNorm):
            nn.init.normal_(module.weight, 1.0, 0.1)
            nn.init.normal_(module.bias, 0.0, 0.1)
    return m


def tokens(B=3, T=9) -> torch.Tensor:
    return torch.randint(4, CFG["vocab_size"], (B, T))


def torch_reference(ours: DecoderOnly) -> nn.TransformerEncoder:
    """torch.nn.TransformerEncoder with our weights: a causal mask makes it the decoder-only body."""
    cfg = ours.config
    layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, batch_first=True,
                                       norm_first=cfg.norm_first)
    final = nn.LayerNorm(cfg.d_model) if cfg.norm_first else None
    ref = nn.TransformerEncoder(layer, cfg.n_layers, norm=final, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for mine, theirs in zip(ours.layers, ref.layers):
            for a, b in (("in_proj_weight", mine.self_attn.in_proj.weight), ("in_proj_bias", mine.self_attn.in_proj.bias)):
                getattr(theirs.self_attn, a).copy_(b)
            theirs.self_attn.out_proj.load_state_dict(mine.self_attn.out_proj.state_dict())
            theirs.linear1.load_state_dict(mine.ff.linear1.state_dict())
            theirs.linear2.load_state_dict(mine.ff.linear2.state_dict())
            theirs.norm1.load_state_dict(mine.sa_conn.norm.state_dict())
            theirs.norm2.load_state_dict(mine.ff_conn.norm.state_dict())
        if final is not None:
            final.load_state_dict(ours.final_norm.state_dict())
    return ref


@pytest.mark.parametrize("norm_first", [True, False])
@torch.no_grad()
def test_forward_equals_torch_encoder_with_a_causal_mask(norm_first, device):
    ours = model(norm_first=norm_first).to(device)
    x = tokens().to(device)
    T = x.shape[1]
    embedded = ours.embed(x) + ours.positions(T)
    causal = ~masks.causal_mask(T, device=device)  # torch's bool masks say True = may NOT attend
    hidden = torch_reference(ours).to(device)(embedded, mask=causal)
    torch.testing.assert_close(ours(x), F.linear(hidden, ours.embed.weight), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_attention_is_causal():
    weights = model().attention(tokens())
    for w in weights:  # (B, H, T, T)
        assert torch.all(w.triu(diagonal=1) == 0) and torch.allclose(w.sum(-1), torch.ones(()))
    x = tokens()
    changed = x.clone()
    changed[:, 5:] = 4  # the future cannot change the past
    torch.testing.assert_close(model()(x)[:, :5], model()(changed)[:, :5])


@torch.no_grad()
def test_cached_generation_equals_recomputation_token_by_token(device):
    m, prompt = model().to(device), tokens(B=2, T=4).to(device)
    state = m.start(prompt, capacity=8)
    seq = prompt
    step_input = torch.full((2,), BOS_ID, device=device)
    for _ in range(6):
        cached = m.step(step_input, state)  # (B, V)
        recomputed = m(seq)[:, -1]
        torch.testing.assert_close(cached, recomputed, atol=1e-5, rtol=1e-5)
        step_input = cached.argmax(-1)
        seq = torch.cat([seq, step_input[:, None]], dim=1)


@torch.no_grad()
def test_greedy_search_continues_the_prompt_unchanged():
    m, prompt = model(tie_output=False), tokens(B=2, T=4)
    m.output_proj.weight.data[EOS_ID] = 0.0  # EOS scores 0, below the best of the others: no early stop
    out = greedy_search(m, prompt, max_len_a=0.0, max_len_b=5)
    seq = prompt
    for _ in range(5):
        logits = m(seq)[:, -1]
        logits[:, [PAD_ID, BOS_ID]] = float("-inf")  # the searches never emit these
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    assert out == seq[:, 4:].tolist()


def test_state_reorder_against_an_explicit_gather():
    m, prompt = model(), tokens(B=3, T=4)
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        state = m.start(prompt)
        m.step(torch.full((3,), BOS_ID), state)  # hands out the prompt's logits
        m.step(torch.tensor([5, 6, 7]), state)
        moved = state.reorder(index)
        length = state.cache.length
        for layer in range(len(m.layers)):
            torch.testing.assert_close(moved.cache.self_k[layer][:, :, :length],
                                       state.cache.self_k[layer][index, :, :length])
        next_logits = m.step(torch.tensor([8, 9, 9]), moved)
        history = torch.cat([prompt, torch.tensor([[5], [6], [7]])], dim=1)[index]
        recomputed = m(torch.cat([history, torch.tensor([[8], [9], [9]])], dim=1))[:, -1]
    torch.testing.assert_close(next_logits, recomputed, atol=1e-5, rtol=1e-5)


def test_prompts_must_not_be_padded_and_save_load_round_trip(tmp_path):
    m = model()
    with pytest.raises(ValueError, match="one length"):
        m.start(torch.tensor([[5, 6, PAD_ID]]))
    m.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert isinstance(loaded, DecoderOnly) and loaded.config == m.config
    x = tokens()
    torch.testing.assert_close(loaded(x), m(x))


def test_the_shared_searches_stop_at_the_block_a_prompt_fills():
    """Learned positions: a prompt of 8 in a block of 16 leaves room for 9 outputs (the prompt's last
    token predicts the first), however long the output limit asked for."""
    from aiayn.config import DecodeConfig
    from aiayn.decoding import beam_search

    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                          max_positions=16, positional="learned")).eval()
    prompt = torch.randint(4, 20, (2, 8))
    from aiayn.decoding.common import output_limits

    assert output_limits(model, prompt, 0.0, 100).tolist() == [9, 9]  # 16 - 8 + 1, whatever was asked
    outs = greedy_search(model, prompt, 0.0, 100)
    assert max(len(o) for o in outs) <= 9
    assert all(len(h.tokens) <= 9 for hyps in beam_search(model, prompt, DecodeConfig(beam_size=2)) for h in hyps)


@pytest.mark.parametrize("bad, message", [
    ({"attention_score": "dott"}, "attention_score must be one of"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ({"activation_dropout": -0.5}, r"activation_dropout must be in \[0, 1\)"),
])
def test_config_refuses_what_the_layers_cannot_use(bad, message):
    from aiayn.config import ConfigError
    from aiayn.models import DecoderOnlyConfig

    with pytest.raises(ConfigError, match=message):
        DecoderOnlyConfig(**bad)
