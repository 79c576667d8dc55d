import pytest
import torch

from aiayn.config import TransformerConfig
from aiayn.models.transformer import Transformer, count_parameters

V = 24


def tiny(**overrides) -> Transformer:
    return Transformer(TransformerConfig.preset("tiny", src_vocab_size=V, **overrides)).eval()


def batch(B=3, S=7, T=6):
    src = torch.randint(4, V, (B, S))
    src[1, 5:] = 0
    src[2, 2:] = 0
    return src, torch.randint(4, V, (B, T))


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned"}, {"tgt_vocab_size": 30},
                                       {"copy_attention": True}])
@torch.no_grad()
def test_cached_decoding_equals_recomputation_at_every_step(overrides, device):
    model = tiny(**overrides).to(device)
    src, tgt = (t.to(device) for t in batch())
    enc = model.encode(src)
    cache = model.init_cache(enc, capacity=2)  # small capacity: exercises buffer growth
    for t in range(tgt.shape[1]):
        step = model.decode(tgt[:, t : t + 1], cache).logits[:, 0]
        full = model(src, tgt[:, : t + 1])[:, -1]
        torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("overrides", [{}, {"recurrence": "universal"}])
@torch.no_grad()
def test_decoding_a_chunk_after_a_past_equals_recomputation(need_weights, overrides):
    """Several new positions at once on a cache that already holds some (the causal mask offset by
    the past, on the fused and the explicit path): the logits the whole prefix gives there."""
    model = tiny(**overrides)
    src, tgt = batch()
    cache = model.init_cache(model.encode(src), capacity=2)
    model.decode(tgt[:, :3], cache, need_weights=need_weights)
    chunk = model.decode(tgt[:, 3:6], cache, need_weights=need_weights).logits  # (B, 3, V)
    torch.testing.assert_close(chunk, model(src, tgt[:, :6])[:, 3:], atol=1e-5, rtol=1e-5)
    assert cache.length == 6


@pytest.mark.parametrize("overrides", [{}, {"source_positions": "end"}, {"copy_attention": True}])
@torch.no_grad()
def test_padding_invariance(device, overrides):
    """A sentence's outputs do not change when batched with longer ones."""
    model = tiny(**overrides).to(device)
    short_src, short_tgt = torch.randint(4, V, (1, 4)), torch.randint(4, V, (1, 3))
    long_src, long_tgt = torch.randint(4, V, (1, 9)), torch.randint(4, V, (1, 8))
    alone = model(short_src.to(device), short_tgt.to(device))
    src = torch.zeros(2, 9, dtype=torch.long)
    src[0, :4], src[1] = short_src, long_src
    tgt = torch.zeros(2, 8, dtype=torch.long)
    tgt[0, :3], tgt[1] = short_tgt, long_tgt
    batched = model(src.to(device), tgt.to(device))
    torch.testing.assert_close(batched[0, :3], alone[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_source_positions_from_the_end_count_back_from_each_rows_last_token():
    """source_positions = "end": row b's token i gets the encoding of position len_b - 1 - i, so a
    source's end keeps its positions when words are put in front of it. Against the layers run by
    hand on each row alone, with the sinusoid table reversed."""
    model = tiny(source_positions="end")
    src = batch()[0]
    memory = model.encode(src).memory  # (B, S, D)
    for row, ids in zip(memory, src):
        ids = ids[ids != 0][None]  # (1, n)
        n = ids.shape[1]
        table = model.encoder.positions(n)  # (n, D): positions 0 .. n-1
        x = model.encoder.embed(ids) + table.flip(0)  # the last token at position 0
        for layer in model.encoder.layers:
            x, _ = layer(x, None)
        torch.testing.assert_close(row[:n], x[0], atol=1e-5, rtol=1e-5)
    start = tiny()
    start.load_state_dict(model.state_dict())
    assert not torch.allclose(start.encode(src).memory, memory, atol=1e-3)  # the option changes the encoding


@torch.no_grad()
def test_empty_source_gives_no_nan():
    model = tiny()
    src = torch.tensor([[5, 6, 7], [0, 0, 0]])  # second sentence is all padding
    logits = model(src, torch.randint(4, V, (2, 4)))
    assert torch.isfinite(logits).all()


@torch.no_grad()
def test_cache_reorder_follows_rows():
    model = tiny()
    src, tgt = batch()
    cache = model.init_cache(model.encode(src))
    model.decode(tgt[:, :3], cache)
    order = torch.tensor([2, 2, 0, 1])
    reordered = cache.reorder(order)
    expected = model.init_cache(model.encode(src[order]))
    model.decode(tgt[order, :3], expected)
    a = model.decode(tgt[order, 3:4], reordered).logits
    b = model.decode(tgt[order, 3:4], expected).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert reordered.length == 4 and reordered.batch_size == 4


@pytest.mark.parametrize("name", ["tiny", "small", "base", "big"])
def test_parameter_count_matches_analytic(name):
    cfg = TransformerConfig.preset(name, src_vocab_size=37000)
    with torch.device("meta"):  # shapes only: no memory, no initialisation time
        model = Transformer(cfg)
    assert model.num_parameters() == count_parameters(cfg)


def test_base_count_with_shared_37k_vocabulary():
    # 6 x 3,152,384 (encoder) + 6 x 4,204,032 (decoder) + 37,000 x 512 (one shared matrix)
    assert count_parameters(TransformerConfig(src_vocab_size=37000)) == 63_082_496


@pytest.mark.parametrize("overrides", [{}, {"tie_output": False}, {"tgt_vocab_size": 30}, {"norm_first": True},
                                       {"copy_attention": True}, {"recurrence": "universal"},
                                       {"recurrence": "universal", "halting": "act", "depth_steps": 5}])
def test_counts_for_variants(overrides):
    cfg = TransformerConfig.preset("tiny", src_vocab_size=V, **overrides)
    assert Transformer(cfg).num_parameters() == count_parameters(cfg)


def test_weight_sharing():
    model = tiny()
    assert model.encoder.embed is model.decoder.embed
    assert model.output_proj is None
    separate = tiny(tgt_vocab_size=30)
    assert separate.encoder.embed is not separate.decoder.embed


def test_save_and_load_round_trip(tmp_path):
    model = tiny(norm_first=True)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = Transformer.from_pretrained(tmp_path)
    assert loaded.config == model.config
    src, tgt = batch()
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt))
    assert loaded.encoder.embed is loaded.decoder.embed  # tying survives the round trip


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        Transformer.from_pretrained(tmp_path)
    tiny().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    with pytest.raises(ValueError, match="model.safetensors"):
        Transformer.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json"):
        Transformer.from_pretrained(tmp_path)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned"}, {"tgt_vocab_size": 30},
                                       {"copy_attention": True}])
def test_backward_reaches_every_parameter_with_finite_gradients(overrides):
    """Every parameter gets a gradient, finite and not all zero: a detached path (or a parameter the
    forward pass never uses) fails here instead of passing with nothing checked."""
    model = tiny(**overrides).train()
    src, tgt = batch()
    model(src, tgt).logsumexp(-1).mean().backward()
    params = dict(model.named_parameters())
    assert len(params) > 50  # the tiny preset's 2+2 layers, embeddings and norms
    assert [n for n, p in params.items() if p.grad is None] == []
    assert [n for n, p in params.items() if not torch.isfinite(p.grad).all()] == []
    assert [n for n, p in params.items() if not p.grad.any()] == []


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_other_attention_scores_decode_with_the_model_step(score):
    """§3.2.1's alternatives: cached steps equal teacher forcing, the parameter count is still
    analytic, and the FastDecoder (scaled dot-product only) steps aside."""
    from aiayn.decoding import for_inference, greedy_search
    from aiayn.models.fast_decoder import FastDecoder

    model = tiny(attention_score=score).eval()
    assert model.num_parameters() == count_parameters(model.config)
    src, tgt = batch()
    full = model(src, tgt)
    state = model.start(src)
    for t in range(tgt.shape[1]):
        torch.testing.assert_close(model.step(tgt[:, t], state), full[:, t], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=score):
        FastDecoder(model)
    assert for_inference(model) is model
    assert len(greedy_search(model, src, 1.0, 3)) == src.shape[0]
