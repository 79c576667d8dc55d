"""Sentences as the encoder's units (`model.source_units = "sentences"`, `aiayn.modules.sentences`):
the pooling against MemN2N's position-encoding formula written out in Python numbers, the encoder
against torch's layers over those vectors, batching, the qa task's end ids, decoding and saving."""

import math

import pytest
import torch
from torch import nn

from aiayn.config import EOS_ID, ConfigError, DecodeConfig, TransformerConfig
from aiayn.decoding import beam_search, greedy_search
from aiayn.models import Transformer, load_model
from aiayn.modules.sentences import SentencePooling

from test_layers import copy_common, randomise_norms

V, D, END, QMARK = 15, 8, 5, 6
SOURCES = [[7, 8, END, 9, END, 7, 10, 7, QMARK, EOS_ID],  # three sentences and EOS
           [9, QMARK, 8, 8, 11, END, EOS_ID, 0, 0, 0]]  # two and EOS, then padding


def reference_pooling(x: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """m_i = Σ_j l_j ⊙ x_ij with l_kj = (1 - j/J) - (k/d)(1 - 2j/J) (Sukhbaatar et al., 2015, §4.1)."""
    sentences, current = [], []
    for pos, token in enumerate(ids):
        if token == 0:
            break
        current.append(pos)
        if token in (END, QMARK):
            sentences.append(current)
            current = []
    sentences += [current] if current else []
    out = torch.zeros(len(sentences), x.shape[-1])
    for i, positions in enumerate(sentences):
        big_j = len(positions)
        for j, pos in enumerate(positions, start=1):
            for k in range(1, x.shape[-1] + 1):
                out[i, k - 1] += ((1 - j / big_j) - (k / x.shape[-1]) * (1 - 2 * j / big_j)) * float(x[pos, k - 1])
    return out


def test_pooling_is_the_position_encoded_sum_of_each_sentence():
    src = torch.tensor(SOURCES)
    x = torch.randn(2, src.shape[1], D, generator=torch.Generator().manual_seed(0))
    pooled, mask = SentencePooling((END, QMARK))(x, src, src != 0)
    assert mask.tolist() == [[True] * 4, [True] * 3 + [False]]
    for row in range(2):
        expected = reference_pooling(x[row], SOURCES[row])
        torch.testing.assert_close(pooled[row, : len(expected)], expected, atol=1e-5, rtol=1e-5)
    assert not pooled[1, 3].any()  # the padded sentence slot is zero (and masked)


def test_a_sentence_model_needs_its_end_ids_and_refuses_copy_attention():
    with pytest.raises(ValueError, match="needs sentence_ends"):
        Transformer(TransformerConfig(src_vocab_size=V, source_units="sentences"))
    with pytest.raises(ConfigError, match="copy_attention copies source tokens"):
        TransformerConfig(src_vocab_size=V, source_units="sentences", sentence_ends=(END,), copy_attention=True)
    with pytest.raises(ConfigError, match="source_units"):
        TransformerConfig(src_vocab_size=V, source_units="words")


def sentence_model(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(src_vocab_size=V, d_model=D, n_heads=2, d_ff=16, dropout=0.0, n_encoder_layers=2,
               n_decoder_layers=2, source_units="sentences", sentence_ends=(END, QMARK))
    model = Transformer(TransformerConfig(**{**cfg, **overrides})).eval()
    randomise_norms(model)
    return model


def signal(n: int) -> torch.Tensor:
    """The §3.5 sinusoids of positions 0 .. n-1, from the formula: (n, D)."""
    angle = lambda p, i: p / 10000 ** ((i - i % 2) / D)  # noqa: E731
    return torch.tensor([[math.sin(angle(p, i)) if i % 2 == 0 else math.cos(angle(p, i)) for i in range(D)]
                         for p in range(n)])


@torch.no_grad()
def test_the_encoder_runs_torch_layers_over_sentence_vectors_and_decodes_against_their_mask():
    model = sentence_model()
    src = torch.tensor(SOURCES)
    enc = model.encode(src)
    assert enc.memory.shape == (2, 4, D) and enc.src_mask.tolist() == [[True] * 4, [True] * 3 + [False]]
    for row in range(2):  # each row alone: its sentences, positions over sentences, torch's layers
        x = reference_pooling(model.encoder.embed(src[row:row + 1])[0], SOURCES[row])
        x = (x + signal(len(x)))[None]
        for layer in model.encoder.layers:
            ref = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=True).eval()
            copy_common(layer, ref, [ref.norm1, ref.norm2])
            x = ref(x)
        torch.testing.assert_close(enc.memory[row, : x.shape[1]], x[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_beam_one_is_greedy_and_a_saved_model_keeps_its_end_ids(tmp_path):
    model = sentence_model()
    src = torch.tensor(SOURCES)
    greedy = greedy_search(model, src, 0.0, 6)
    assert [h[0].tokens for h in beam_search(model, src, DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=6))] == greedy
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path).eval()
    assert loaded.config.sentence_ends == (END, QMARK)
    torch.testing.assert_close(loaded.encode(src).memory, model.encode(src).memory)


def test_attention_plots_label_each_sentence_as_the_pooling_groups_them():
    from aiayn.decoding.attention_maps import decode_with_attention, sentence_labels

    assert sentence_labels(["a", "b", ".", "c", "?", "</s>"], [7, 8, END, 9, QMARK, EOS_ID], (END, QMARK)) == [
        "a b .", "c ?", "</s>"]
    pooling, generator = SentencePooling((END, QMARK)), torch.Generator().manual_seed(3)
    for _ in range(20):  # as many labels as the pooling makes sentences
        ids = torch.randint(3, 9, (int(torch.randint(1, 12, (1,), generator=generator)),), generator=generator)
        _, mask = pooling(torch.zeros(1, len(ids), D), ids[None], torch.ones(1, len(ids), dtype=torch.bool))
        assert len(sentence_labels([str(i) for i in ids.tolist()], ids.tolist(), (END, QMARK))) == int(mask.sum())
    maps = decode_with_attention(sentence_model(), SOURCES[0], 0.0, 3)
    assert maps.cross.shape[-1] == maps.encoder.shape[-1] == 4  # the decoder attends over sentences
