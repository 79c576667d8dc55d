"""`aiayn plot attention` for the one-stack models: GPT's causal and BERT's bidirectional self-attention."""

import numpy as np
import pytest
import torch

from aiayn.cli import main
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.models import DecoderOnly, DecoderOnlyConfig, EncoderOnly, EncoderOnlyConfig
from aiayn.plots.attention import attention_for_sentence, plot_attention

WORDS = "the cat sat on a mat".split()


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-only"])
def test_self_attention_maps_and_plot(tmp_path, kind):
    torch.manual_seed(0)
    vocab = 4 + len(WORDS)
    model = (DecoderOnly(DecoderOnlyConfig(vocab_size=vocab, d_model=16, n_heads=2, n_layers=2, d_ff=32))
             if kind == "decoder-only" else
             EncoderOnly(EncoderOnlyConfig(vocab_size=vocab, d_model=16, n_heads=2, n_layers=2, d_ff=32)))
    model.save_pretrained(tmp_path)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(WORDS)), tmp_path)
    maps = attention_for_sentence(tmp_path, "the cat sat on a mat")
    part = "decoder" if kind == "decoder-only" else "encoder"
    weights = maps.part(part)  # (L, H, T, T)
    n = 6 if part == "decoder" else 7  # BERT reads [CLS] first
    assert weights.shape == (2, 2, n, n) and np.allclose(weights.sum(-1), 1.0, atol=1e-5)
    upper = np.triu(weights, k=1).sum()
    assert (upper == 0) if part == "decoder" else (upper > 0)  # causal vs bidirectional
    assert maps.src_labels[0] == ("the" if part == "decoder" else "[CLS]")
    with pytest.raises(ValueError, match="no encoder-decoder attention"):
        maps.part("cross")
    fig, arrays = plot_attention(maps)  # the default part is the model's own
    assert f"{part}/layer1/head0" in arrays
    assert main(["plot", "attention", "--model", str(tmp_path), "--sentence", "the cat sat",
                 "--output", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 1000
