"""The recurrent encoder-decoder (Bahdanau / Luong attention) through the same decoding interface."""

import math

import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, DecodeConfig
from aiayn.decoding import beam_search, greedy_search
from aiayn.models import RNNConfig, RNNEncoderDecoder, load_model
from aiayn.models.rnn import Score

from copy_task import train_and_copy

V = 14


def rnn(**overrides) -> RNNEncoderDecoder:
    torch.manual_seed(0)
    return RNNEncoderDecoder(RNNConfig(src_vocab_size=V, embed_dim=8, hidden_size=12, dropout=0.0, **overrides)).eval()


def sources() -> torch.Tensor:
    src = torch.randint(4, V, (3, 6), generator=torch.Generator().manual_seed(1))
    src[:, -1] = EOS_ID
    src[1, 3:] = 0
    src[1, 2] = EOS_ID
    return src


def test_scores_against_hand_computed_values():
    q = torch.tensor([[1.0, 2.0]])  # (N=1, H=2)
    memory = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, S=3, 2)
    scores = {kind: Score(kind, 2) for kind in ("dot", "general", "additive", "concat")}
    with torch.no_grad():
        scores["general"].w_k.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
        for kind in ("additive", "concat"):
            s = scores[kind]
            s.w_q.weight.copy_(torch.eye(2))
            s.w_k.weight.copy_(torch.eye(2))
            s.v.weight.copy_(torch.tensor([[1.0, 1.0]]))
        scores["additive"].w_k.bias.zero_()
        got = {kind: s(q, s.keys(memory))[0].tolist() for kind, s in scores.items()}
    assert got["dot"] == [1.0, 2.0, 3.0]  # qᵀk
    assert got["general"] == [2.0, 2.0, 4.0]  # qᵀ W k, W k = (2, 0), (0, 1), (2, 1)
    t = math.tanh
    for kind in ("additive", "concat"):  # vᵀ tanh(q + k): q + k = (2, 2), (1, 3), (2, 3)
        assert got[kind] == pytest.approx([2 * t(2), t(1) + t(3), t(2) + t(3)])


@pytest.mark.parametrize("overrides", [{}, {"input_feeding": True}, {"cell": "lstm", "score": "general"},
                                       {"score": "concat", "decoder_layers": 2, "encoder_layers": 2}])
@torch.no_grad()
def test_step_by_step_equals_teacher_forcing(overrides):
    model, src = rnn(**overrides), sources()
    tgt = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, V, (3, 4))], dim=1)
    full = model(src, tgt)  # (B, T, V)
    state = model.start(src)
    for t in range(tgt.shape[1]):
        torch.testing.assert_close(model.step(tgt[:, t], state), full[:, t], atol=1e-5, rtol=1e-5)


def test_beam_one_is_greedy_and_padding_changes_nothing():
    model, src = rnn(score="dot"), sources()
    greedy = greedy_search(model, src, 1.0, 5)
    assert [h[0].tokens for h in beam_search(model, src, DecodeConfig(beam_size=1, length_penalty=0.0, max_len_b=5))] \
        == greedy
    alone = src[1:2, :3]  # the padded row without its padding
    assert greedy_search(model, alone, 1.0, 5)[0] == greedy[1]


@torch.no_grad()
def test_reorder_equals_an_explicit_gather():
    model, src = rnn(cell="lstm", input_feeding=True), sources()
    state = model.start(src)
    model.step(torch.full((3,), BOS_ID), state)
    rows = torch.tensor([2, 0, 0])
    moved = state.reorder(rows)
    for got, ref in zip(moved.hidden, state.hidden):
        assert torch.equal(got, ref[:, rows])
    assert torch.equal(moved.feed, state.feed[rows]) and torch.equal(moved.memory, state.memory[rows])
    tokens = torch.tensor([5, 6, 7])
    expected = model.step(tokens, moved)
    explicit = model.start(src[rows])
    model.step(torch.full((3,), BOS_ID), explicit)
    torch.testing.assert_close(model.step(tokens, explicit), expected)


def test_saved_as_model_type_rnn(tmp_path):
    model = rnn(score="general")
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert isinstance(loaded, RNNEncoderDecoder) and loaded.config == model.config
    src = sources()
    assert greedy_search(loaded, src, 1.0, 4) == greedy_search(model, src, 1.0, 4)


def test_saves_weights_packed_into_one_buffer(tmp_path):
    """On CUDA, cuDNN packs an RNN's weights into one buffer (seen on an H100); here the packing is
    done by hand. The weights must still save, each under its own name, and load back equal."""
    model = rnn()
    params = [p for p in model.parameters() if p.dim() > 0]
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        p.data = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    for (name, mine), (_, theirs) in zip(model.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(theirs, mine, msg=name)


@pytest.mark.slow  # a learning check of more than a few seconds
def test_learns_to_copy():
    """Bahdanau attention on the copy task: 100% exact match on held-out sequences."""
    torch.manual_seed(0)
    model = RNNEncoderDecoder(RNNConfig(src_vocab_size=V, embed_dim=32, hidden_size=64, dropout=0.0))
    expected, got = train_and_copy(model, V, steps=600)
    assert got == expected


def test_trains_and_translates_through_the_toolkit(tmp_path):
    """`[model] type = "rnn"`: the same recipe format, trainer, checkpoints and Translator."""
    from aiayn.decoding.translator import Translator
    from aiayn.training.config import load_config
    from aiayn.training.pipeline import train

    cfg = load_config(None, [f"train.run_dir={tmp_path / 'run'}", "train.max_updates=4", "train.progress=false",
                             'model.type="rnn"', "model.hidden_size=16", "model.embed_dim=8", 'model.score="general"',
                             "data.vocab_type=\"symbols\"", "data.n_train=200", "data.n_valid=10", "data.max_tokens=300",
                             "train.validate_every=2", "train.save_every_updates=2", "optim.warmup_steps=2"])
    result = train(cfg)
    assert result.state.step == 4 and "bleu" in result.last_valid
    translator = Translator.from_pretrained(tmp_path / "run" / "model")
    assert isinstance(translator.model, RNNEncoderDecoder)
    assert all(isinstance(t, str) for t in translator.translate(["a b c", "d e"], beam_size=2))


def test_alignment_picture_of_the_rnn(tmp_path, capsys):
    """`aiayn plot attention` draws the RNN's cross-attention (Bahdanau et al.'s Figure 3)."""
    import numpy as np

    from aiayn.cli import main
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
    from aiayn.tasks import load_pipeline

    tok = SymbolTokenizer([chr(ord("a") + i) for i in range(V - 4)])
    rnn(input_feeding=True).save_pretrained(tmp_path / "m")
    save_tokenizers(TokenizerPair.shared(tok), tmp_path / "m")
    maps = load_pipeline(tmp_path / "m").attention("a b c", max_len_b=3)
    L, H, T, S = maps.cross.shape
    assert (L, H, S) == (1, 1, 4) and T == len(maps.out_ids)  # "a b c" + EOS
    np.testing.assert_allclose(maps.cross.sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="no encoder self-attention"):
        maps.part("encoder")
    out = tmp_path / "rnn.png"
    assert main(["plot", "attention", "--model", str(tmp_path / "m"), "--sentence", "a b c", "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    assert main(["plot", "attention", "--model", str(tmp_path / "m"), "--sentence", "a b", "--part", "all",
                 "-o", str(tmp_path / "x.png")]) == 0  # "all": every part the model has, here the cross-attention
    assert main(["plot", "attention", "--model", str(tmp_path / "m"), "--sentence", "a b", "--part", "encoder",
                 "-o", str(tmp_path / "x.png")]) == 2
    assert "no encoder self-attention" in capsys.readouterr().err
