"""`benchmarks/train_throughput.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import math
import sys

import pytest

from bench_helpers import BENCHMARKS, last_json_line


def test_train_throughput_json_keys():
    out = last_json_line("train_throughput.py", "--configs", "tiny", "--precisions", "fp32,bf16",
                         "--steps", "2", "--warmup-steps", "1", "--max-tokens", "300",
                          "--peak-size", "256", "--threads", "1", "--json")
    assert out["peak_gflops"] > 0
    assert [(r["config"], r["precision"]) for r in out["rows"]] == [("tiny", "fp32"), ("tiny", "bf16")]
    for row in out["rows"]:
        assert {"config", "precision", "ours_tok_s", "torch_tok_s", "ratio", "mfu"} <= row.keys()
        assert all(math.isfinite(row[k]) and row[k] > 0 for k in ("ours_tok_s", "torch_tok_s", "ratio", "mfu"))
        assert math.isclose(row["ratio"], row["ours_tok_s"] / row["torch_tok_s"])


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_torch_reference_has_ours_dropouts_and_final_norms(norm_first):
    """nn.Transformer's one dropout fell on attention weights and inside the FFN too (work ours does not do
    by default, and it kept torch's attention off its fused kernels), and its final norms stood in post-norm."""
    sys.path.insert(0, str(BENCHMARKS))
    from torch import nn

    from aiayn.config import TransformerConfig
    from train_throughput import TorchReference

    ref = TorchReference(TransformerConfig.preset("tiny", src_vocab_size=50, norm_first=norm_first)).transformer
    layers = [*ref.encoder.layers, *ref.decoder.layers]
    assert all(layer.self_attn.dropout == 0.0 and isinstance(layer.dropout, nn.Identity) for layer in layers)
    assert all(layer.multihead_attn.dropout == 0.0 for layer in ref.decoder.layers)
    assert all(layer.dropout1.p == 0.1 for layer in layers)  # the residual dropout, as ours (§5.4)
    assert isinstance(ref.encoder.norm, nn.LayerNorm) == isinstance(ref.decoder.norm, nn.LayerNorm) == norm_first


def test_train_flops_counts_one_linear_by_hand():
    """One encoder and one decoder layer, D=2, F=4, V=8, B=1, S=T=1, counted by hand."""
    sys.path.insert(0, str(BENCHMARKS))
    from train_throughput import train_flops

    from aiayn.config import TransformerConfig

    cfg = TransformerConfig(src_vocab_size=8, d_model=2, n_heads=1, d_ff=4, n_encoder_layers=1, n_decoder_layers=1)
    enc = 2 * (4 * 4 + 2 * 8) + 4 * 2  # QKVO + FFN, then QKᵀ and AV
    dec = 2 * (6 * 4 + 2 * 8) + 2 * 2 * 4 + 4 * 2 + 4 * 2  # + memory K/V, self and cross QKᵀ/AV
    out = 2 * 2 * 8
    assert train_flops(cfg, 1, 1, 1) == 3 * (enc + dec + out)


def test_train_throughput_configs_take_overrides_of_a_preset():
    sys.path.insert(0, str(BENCHMARKS))
    from train_throughput import model_config

    from aiayn.config import TransformerConfig

    cfg = model_config("small+d_model=128+n_encoder_layers=4+dropout=0.2")
    small = TransformerConfig.preset("small", src_vocab_size=cfg.src_vocab_size)
    assert (cfg.d_model, cfg.n_encoder_layers, cfg.dropout) == (128, 4, 0.2)
    assert (cfg.d_ff, cfg.n_heads, cfg.n_decoder_layers) == (small.d_ff, small.n_heads, small.n_decoder_layers)
    assert model_config("small") == small
    for bad in ("small+d_model=x", "small+nonsense=3", "small+d_model", "nope"):
        with pytest.raises(SystemExit, match="--configs"):
            model_config(bad)
