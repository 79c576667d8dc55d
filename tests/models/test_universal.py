"""The Universal Transformer (`model.recurrence = "universal"`, `aiayn.modules.universal`) against
references written out step by step: torch's own layers with copied weights applied again and
again with the coordinate embedding (positions + timestep sinusoids, computed here from the
formula), a per-position scalar loop for ACT halting, cached vs uncached decoding, the copy task."""

import math

import pytest
import torch
from torch import nn

from aiayn.config import EOS_ID, ConfigError, DecodeConfig, TransformerConfig
from aiayn.decoding import beam_search, greedy_search
from aiayn.models import Transformer, load_model
from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
from aiayn.modules.universal import ACT_EPSILON
from aiayn.tasks.loss import LossSums, add_ponder_cost, ponder_weight

from copy_task import train_and_copy
from test_layers import copy_attention, copy_common, randomise_norms

V, D = 15, 16


def universal(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(src_vocab_size=V, d_model=D, n_heads=4, d_ff=32, dropout=0.0, n_encoder_layers=3,
               n_decoder_layers=2, recurrence="universal")
    model = Transformer(TransformerConfig(**{**cfg, **overrides})).eval()
    randomise_norms(model)
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    """(2, 6) ids, the second row padded after 4 tokens; and its keep mask."""
    src = torch.randint(4, V, (2, 6), generator=torch.Generator().manual_seed(1))
    src[0, -1], src[1, 3], src[1, 4:] = EOS_ID, EOS_ID, 0
    return src, src != 0


def signal(n: int, start: int = 0) -> torch.Tensor:
    """The §3.5 sinusoids of n positions from `start`, written from the formula: (n, D)."""
    out = torch.zeros(n, D)
    for pos in range(n):
        for i in range(D // 2):
            angle = (start + pos) / 10000 ** (2 * i / D)
            out[pos, 2 * i], out[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return out


def torch_encoder_layer(layer, norm_first: bool) -> nn.TransformerEncoderLayer:
    ref = nn.TransformerEncoderLayer(D, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_common(layer, ref, [ref.norm1, ref.norm2])
    return ref


def reference_states(embedded, keep, layer, steps: int, norm_first: bool, positions) -> torch.Tensor:
    """H^t = Layer(H^{t-1} + positions + timestep(t)), t = 1 .. steps, with torch's layer."""
    ref = torch_encoder_layer(layer, norm_first)
    x = embedded
    for t in range(1, steps + 1):
        x = ref(x + positions + signal(1, start=t), src_key_padding_mask=~keep)
    return x


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_encoder_is_one_torch_layer_applied_again_and_again(norm_first):
    model = universal(norm_first=norm_first, depth_steps=4)
    src, keep = sources()
    expected = reference_states(model.encoder.embed(src), keep, model.encoder.universal.layer, 4, norm_first,
                                signal(6))
    if norm_first:
        expected = model.encoder.final_norm(expected)
    torch.testing.assert_close(model.encode(src).memory[keep], expected[keep], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_depth_steps_default_to_the_layer_counts_and_weights_are_shared():
    model = universal()
    assert (model.encoder.universal.steps, model.decoder.universal.steps) == (3, 2)
    one_layer = universal(n_encoder_layers=1, n_decoder_layers=1, depth_steps=3)
    many_layers = universal(n_encoder_layers=6, n_decoder_layers=6, depth_steps=3)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(one_layer) == count(many_layers)  # the layer count is only the default step count
    assert model.encoder.layers is None and model.decoder.layers is None


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_decoder_matches_torch_layers_and_its_own_cached_steps(norm_first):
    model = universal(norm_first=norm_first, depth_steps=3)
    src, keep = sources()
    tgt = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 10]])
    enc = model.encode(src)
    layer = model.decoder.universal.layer
    ref = nn.TransformerDecoderLayer(D, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_common(layer, ref, [ref.norm1, ref.norm2, ref.norm3])
    copy_attention(layer.cross_attn, ref.multihead_attn)
    x, causal = model.decoder.embed(tgt), nn.Transformer.generate_square_subsequent_mask(4)
    for t in range(1, 4):
        x = ref(x + signal(4) + signal(1, start=t), enc.memory, tgt_mask=causal, memory_key_padding_mask=~keep)
    if norm_first:
        x = model.decoder.final_norm(x)
    teacher = model(src, tgt)
    torch.testing.assert_close(teacher, model.project(x), atol=1e-5, rtol=1e-5)

    state = model.start(src)  # one position at a time, through the cache's per-step slots
    steps = torch.stack([model.step(tgt[:, i], state) for i in range(4)], dim=1)
    torch.testing.assert_close(steps, teacher, atol=1e-5, rtol=1e-5)


def act_reference(encoder, embedded, positions, keep):
    """ACT written per position with Python numbers: each position's halting sum, step count,
    remainder and interpolated output, the layer run on every position at every step."""
    layer, halt, steps = encoder.layer, encoder.halt, encoder.steps
    B, S, _ = embedded.shape
    total = [[0.0] * S for _ in range(B)]
    count = [[0] * S for _ in range(B)]
    remainder = [[0.0] * S for _ in range(B)]
    done = [[False] * S for _ in range(B)]
    output, state = torch.zeros_like(embedded), embedded
    mask = (~keep)[:, None, None, :].logical_not()
    for t in range(1, steps + 1):
        if all(done[b][s] for b in range(B) for s in range(S) if keep[b, s]):
            break
        state = state + positions + signal(1, start=t)
        p = torch.sigmoid(halt(state))[..., 0]
        state, _ = layer(state, mask)
        for b in range(B):
            for s in range(S):
                if done[b][s]:
                    continue
                count[b][s] += 1
                if total[b][s] + p[b, s].item() > 1 - ACT_EPSILON:
                    weight = remainder[b][s] = 1 - total[b][s]
                    total[b][s], done[b][s] = 1.0, True
                else:
                    weight = p[b, s].item()
                    total[b][s] += weight
                output[b, s] = weight * state[b, s] + (1 - weight) * output[b, s]
    real = [(b, s) for b in range(B) for s in range(S) if keep[b, s]]
    ponder = sum(count[b][s] + remainder[b][s] for b, s in real) / len(real)
    return output, ponder


@pytest.mark.parametrize("bias", [-1.0, 1.0, 3.0])  # halting late (some never), mid-way, at once
@torch.no_grad()
def test_act_halting_matches_a_per_position_reference(bias):
    model = universal(depth_steps=5, halting="act")
    halt = model.encoder.universal.halt
    nn.init.normal_(halt.weight, std=0.5, generator=torch.Generator().manual_seed(2))
    nn.init.constant_(halt.bias, bias)
    src, keep = sources()
    enc = model.encode(src)
    expected, ponder = act_reference(model.encoder.universal, model.encoder.embed(src), signal(6), keep)
    torch.testing.assert_close(enc.memory[keep], expected[keep], atol=1e-5, rtol=1e-5)
    assert enc.ponder.item() == pytest.approx(ponder, abs=1e-5)
    assert 1.0 <= ponder <= 5.0 + 1.0


def test_ponder_cost_reaches_the_halting_unit_and_stays_out_of_the_nll():
    model = universal(depth_steps=4, halting="act").train()
    src, _ = sources()
    _, ponder = model(src, torch.tensor([[1, 5], [1, 6]]), with_ponder=True)
    zero = torch.zeros((), requires_grad=True)
    sums = add_ponder_cost(LossSums(zero * 1.0, torch.tensor(7.0), 3), ponder, 0.5)
    sums.loss.backward()
    assert sums.loss.item() == pytest.approx(0.5 * ponder.item() * 3)
    assert sums.nll.item() == 7.0
    assert model.encoder.universal.halt.weight.grad.abs().sum() > 0
    assert add_ponder_cost(sums, None, 0.5) is sums
    assert ponder_weight(model) == 0.01 and ponder_weight(universal()) == 0.0
    assert ponder_weight(nn.ModuleDict({"module": universal(halting="act", ponder_cost=0.2)})) == 0.2  # DDP's .module


def test_options_are_checked_by_name():
    with pytest.raises(ConfigError, match="halting = 'act' needs recurrence = 'universal'"):
        TransformerConfig(src_vocab_size=V, halting="act")
    with pytest.raises(ConfigError, match="depth_steps"):
        TransformerConfig(src_vocab_size=V, depth_steps=4)
    with pytest.raises(ConfigError, match="recurrence must be one of"):
        TransformerConfig(src_vocab_size=V, recurrence="recurrent")
    with pytest.raises(ConfigError, match="halting must be one of"):
        EncoderOnlyConfig(recurrence="universal", halting="always")


@torch.no_grad()
def test_encoder_only_applies_the_same_recurrence():
    torch.manual_seed(0)
    model = EncoderOnly(EncoderOnlyConfig(vocab_size=V, d_model=D, n_heads=4, d_ff=32, n_layers=2, dropout=0.0,
                                          positional="sinusoidal", recurrence="universal", depth_steps=3,
                                          n_classes=2)).eval()
    tokens = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]])
    ids = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens], dim=1)  # [CLS] = BOS
    keep = ids != 0
    expected = reference_states(model.embed(ids), keep, model.universal.layer, 3, False, signal(5))
    torch.testing.assert_close(model(tokens)[keep], expected[keep], atol=1e-5, rtol=1e-5)
    scores, ponder = model.classify(tokens, with_ponder=True)
    assert scores.shape == (2, 2) and ponder is None


@torch.no_grad()
def test_a_saved_universal_model_decodes_the_same_and_beam_1_is_greedy(tmp_path):
    model = universal(depth_steps=3, halting="act")
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path).eval()
    src, _ = sources()
    torch.testing.assert_close(loaded(src, torch.tensor([[1, 4], [1, 5]])), model(src, torch.tensor([[1, 4], [1, 5]])))
    greedy = greedy_search(loaded, src, 1.0, 4)
    assert [h[0].tokens for h in beam_search(loaded, src, DecodeConfig(beam_size=1, max_len_a=1.0, max_len_b=4))] == greedy


@pytest.mark.slow  # a learning check of 15-20 s on 2 cores
def test_a_universal_transformer_learns_the_copy_task():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=14, d_model=32, n_heads=4, d_ff=64, dropout=0.0,
                                          n_encoder_layers=1, n_decoder_layers=1, depth_steps=2,
                                          recurrence="universal", norm_first=True))
    seqs, outputs = train_and_copy(model, 14, steps=300)
    assert sum(s == o for s, o in zip(seqs, outputs)) == 100
