import numpy as np
import pytest
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding import attention_maps as am
from aiayn.plots import attention as att, save_png
from aiayn.tasks import load_pipeline
from plot_helpers import SYMBOLS, assert_picture, tiny_model


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=1)


SRC = [4, 9, 7, 5, 12, 6, EOS_ID]  # ids + EOS, as encode_source makes them


def test_translation_matches_greedy_search(model):
    maps = am.decode_with_attention(model, SRC, max_len_a=1.0, max_len_b=5)
    expected = greedy_search(model, torch.tensor([SRC]), 1.0, 5)[0]
    assert [i for i in maps.out_ids if i != EOS_ID] == expected


@torch.inference_mode()
def stepwise_attention(model, src: list[int], tgt_in: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Decoder self- and cross-attention gathered as decoding computes them: one cached step per target
    position, each step's row (layers, H, 1, keys) placed in (layers, H, T, T) and (layers, H, T, S)."""
    enc = model.encode(torch.tensor([src]))
    cache, T = model.init_cache(enc, capacity=len(tgt_in)), len(tgt_in)
    self_rows, cross_rows = [], []
    for token in tgt_in:
        out = model.decode(torch.tensor([[token]]), cache, need_weights=True)
        width = cache.length  # the keys this step attended over: the positions so far
        self_rows.append(np.pad(torch.cat(out.self_attentions).numpy(), [(0, 0), (0, 0), (0, 0), (0, T - width)]))
        cross_rows.append(torch.cat(out.cross_attentions).numpy())
    return np.concatenate(self_rows, axis=2), np.concatenate(cross_rows, axis=2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_translation_attention_is_what_cached_decoding_computes(norm_first):
    """The maps drawn (one teacher-forced pass over the greedy output) = the weights of cached step-by-step
    decoding of the same tokens, row by row."""
    model = tiny_model(seed=2, norm_first=norm_first)
    maps = am.decode_with_attention(model, SRC, max_len_a=1.0, max_len_b=4)
    decoder, cross = stepwise_attention(model, SRC, [BOS_ID, *maps.out_ids[:-1]])
    assert maps.decoder.shape == decoder.shape == (2, 2, len(maps.out_ids), len(maps.out_ids))
    np.testing.assert_allclose(maps.decoder, decoder, atol=1e-6)
    np.testing.assert_allclose(maps.cross, cross, atol=1e-6)
    enc = model.encode(torch.tensor([SRC]), need_weights=True).attentions
    np.testing.assert_allclose(maps.encoder, torch.cat(enc).detach().numpy(), atol=1e-6)


def test_rows_sum_to_one_and_future_gets_zero(model):
    maps = am.decode_with_attention(model, SRC, max_len_b=6)
    for part in am.PARTS:
        np.testing.assert_allclose(maps.part(part).sum(-1), 1.0, atol=1e-5)
    future = np.triu(np.ones(maps.decoder.shape[-2:], dtype=bool), k=1)
    assert np.all(maps.decoder[..., future] == 0)
    assert np.all(maps.decoder[..., ~future] > 0)


def test_padded_positions_get_zero_weight(model):
    src = torch.tensor([[4, 5, 6, 7, 8], [9, 10, PAD_ID, PAD_ID, PAD_ID]])  # (2, 5)
    tgt = torch.tensor([[BOS_ID, 4, 5, 6], [BOS_ID, 7, PAD_ID, PAD_ID]])  # (2, 4)
    enc, dec, cross = am.forward_attention(model, src, tgt)
    for w in enc + cross:
        assert torch.all(w[1, ..., 2:] == 0)  # keys at padded source positions
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    for w in dec:
        assert torch.all(w.triu(1) == 0)
    # the short sentence's encoder weights equal those of the sentence alone
    alone, _, _ = am.forward_attention(model, src[1:, :2], tgt[1:, :2])
    torch.testing.assert_close(enc[0][1, :, :2, :2], alone[0][0])


def test_attention_for_sentence_labels_real_tokens(model_dir):
    maps = load_pipeline(model_dir).attention("a c b j", max_len_b=3)
    assert maps.src_labels == ["a", "c", "b", "j", "</s>"]
    assert maps.in_labels[0] == "<s>"
    assert maps.in_labels[1:] == maps.out_labels[:-1]
    assert set(maps.out_labels) <= set(SYMBOLS) | {"</s>"}


@pytest.mark.parametrize("part,head", [("cross", None), ("decoder", 1), ("encoder", None), ("all", 0), ("all", None)])
def test_plot_attention_draws_each_layout(model, tmp_path, part, head):
    maps = am.decode_with_attention(model, SRC, max_len_b=3)
    fig, arrays = att.plot_attention(maps, part, layer=0, head=head, size=(600, 400))
    parts = am.PARTS if part == "all" else (part,)
    n_maps = len(parts) * (1 if head is not None else 2)
    assert sum(1 for k in arrays if "/head" in k) == n_maps
    assert_picture(save_png(fig, tmp_path / "a.png"), (600, 400))


def test_plot_attention_rejects_bad_layer_and_head(model):
    maps = am.decode_with_attention(model, SRC, max_len_b=2)
    with pytest.raises(ValueError, match="layer 5"):
        att.plot_attention(maps, layer=5)
    _, arrays = att.plot_attention(maps, "encoder", layer=-2)
    assert "encoder/layer0/head1" in arrays
    with pytest.raises(ValueError, match="head 2"):
        att.plot_attention(maps, head=2)


def test_save_attention_plot(model_dir, tmp_path):
    """A model directory's attention as a PNG, the way `aiayn plot attention` draws it."""
    fig, _ = att.draw(load_pipeline(model_dir).attention("a b c d", max_len_b=4), size=(500, 400))
    path = save_png(fig, tmp_path / "sub" / "att.png")
    assert path == tmp_path / "sub" / "att.png"
    assert_picture(path, (500, 400))


def test_with_end_adds_the_eos_only_when_the_model_stopped_before_its_length_limit():
    """The served attention map covers the EOS that ended an output, but an output cut off by the
    length limit (|src| * a + b tokens) never produced one."""
    from aiayn.config import EOS_ID, TransformerConfig
    from aiayn.models import Transformer
    from aiayn.decoding.attention_maps import with_end

    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=12)).eval()
    src = torch.tensor([[5, 6, 7, EOS_ID]])  # 4 tokens: the limit is 0.5 * 4 + 1 = 3
    assert with_end(model, src, [5, 6], max_len_a=0.5, max_len_b=1) == [5, 6, EOS_ID]
    assert with_end(model, src, [5, 6, 7], max_len_a=0.5, max_len_b=1) == [5, 6, 7]
