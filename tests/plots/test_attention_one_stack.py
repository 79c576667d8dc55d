"""`aiayn plot attention` for the one-stack models: GPT's causal and BERT's bidirectional self-attention,
reached as every door reaches a model, through its task's pipeline (`load_pipeline(dir).attention`)."""

import json

import numpy as np
import pytest
import torch

from aiayn.cli import main
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.models import DecoderOnly, DecoderOnlyConfig, EncoderOnly, EncoderOnlyConfig
from aiayn.plots.attention import plot_attention
from aiayn.tasks import load_pipeline

WORDS = "the cat sat on a mat".split()


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-only"])
def test_self_attention_maps_and_plot(tmp_path, kind):
    torch.manual_seed(0)
    vocab = 4 + len(WORDS)
    model = (DecoderOnly(DecoderOnlyConfig(vocab_size=vocab, d_model=16, n_heads=2, n_layers=2, d_ff=32))
             if kind == "decoder-only" else
             EncoderOnly(EncoderOnlyConfig(vocab_size=vocab, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_classes=2)))
    model.save_pretrained(tmp_path)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(WORDS)), tmp_path)
    # task.json says which door a directory has (without it a directory is a translation model)
    task = {"task": "lm"} if kind == "decoder-only" else {"task": "classify", "labels": ["no", "yes"]}
    (tmp_path / "task.json").write_text(json.dumps(task))
    maps = load_pipeline(tmp_path).attention("the cat sat on a mat")
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


def test_vit_cls_to_patch_attention(tmp_path):
    """ViT: row 0 of each layer's self-attention, without its [CLS] column, laid on the 4x4 patch grid."""
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the vision extra)")
    import json

    from aiayn.plots.patches import plot_patch_attention
    from aiayn.tasks.vision import load_digits, patches, split_indices

    torch.manual_seed(0)
    vit = EncoderOnly(EncoderOnlyConfig(vocab_size=1, d_model=16, n_heads=2, n_layers=3, d_ff=32, input="patches",
                                        patch_dim=4, n_classes=10, max_positions=17))
    vit.save_pretrained(tmp_path)
    (tmp_path / "task.json").write_text(json.dumps({"task": "image-classify", "labels": list("0123456789"),
                                                    "patch_size": 2}))
    att = load_pipeline(tmp_path).attention(5)  # test image number 5
    assert att.cls.shape == (3, 2, 16)
    x = torch.from_numpy(patches(att.image[None], 2))
    with torch.no_grad():
        expected = torch.stack([w[0, :, 0, 1:] for w in vit.eval().attention(x)]).numpy()
    np.testing.assert_allclose(att.cls, expected, atol=1e-6)
    assert np.all(att.cls.sum(-1) < 1.0)  # the rest went to [CLS] itself
    np.testing.assert_allclose(att.grid(1), expected[1].mean(0).reshape(4, 4), atol=1e-6)
    images, labels = load_digits()
    picked = split_indices(len(labels), "test")[5]  # the task's own split: image 5 of the test images
    assert np.array_equal(att.image, images[picked]) and att.label == str(labels[picked])
    fig, arrays = plot_patch_attention(att)
    assert set(arrays) == {"image", "layer0", "layer1", "layer2"}
    _, per_head = plot_patch_attention(att, layer=2)
    np.testing.assert_allclose(per_head["layer2/head1"], expected[2, 1].reshape(4, 4), atol=1e-6)
    assert main(["plot", "attention", "--model", str(tmp_path), "--image", "5", "-o", str(tmp_path / "v.png")]) == 0
    assert main(["plot", "attention", "--model", str(tmp_path), "--image", "9999", "-o", str(tmp_path / "w.png")]) == 2
