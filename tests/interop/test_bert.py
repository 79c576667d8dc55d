"""BERT <-> aiayn's encoder-only model: classifier and MLM logits, the round trip, the tokenizer,
the classify door."""

from __future__ import annotations

import json

import pytest
import torch

from hf_checkpoints import assert_logits_close, assert_same_tensors, lines
from aiayn.config import PAD_ID
from aiayn.data.tokenizer import load_tokenizers
from aiayn.decoding.common import pad_sources
from aiayn.interop import export_hf
from aiayn.models import load_model

TEXTS = ["a gorgeous , witty , seductive movie .", "the plot is nothing but boilerplate clichés from start to finish"]


def _hf(directory, mlm: bool = False):
    from transformers import AutoTokenizer, BertForMaskedLM, BertForSequenceClassification

    cls = BertForMaskedLM if mlm else BertForSequenceClassification
    return cls.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def _inputs(tok, toks):
    """Hugging Face's padded batch, and ours: the same texts without [CLS] (the model adds it)."""
    b = tok(TEXTS, return_tensors="pt", padding=True)
    ours = pad_sources([toks.src.encode(t) for t in TEXTS], PAD_ID)
    return b, ours


def _compare_classifier(hf, tok, ours_dir) -> None:
    model, toks = load_model(ours_dir), load_tokenizers(ours_dir)
    b, ours = _inputs(tok, toks)
    with torch.no_grad():
        assert_logits_close(model.classify(ours), hf(**b).logits)


def _compare_mlm(hf, tok, ours_dir) -> None:
    model, toks = load_model(ours_dir), load_tokenizers(ours_dir)
    b, ours = _inputs(tok, toks)
    real = b["attention_mask"][:, 1:].bool()  # (B, T): positions after [CLS] that hold tokens
    with torch.no_grad():
        theirs = hf(**b).logits[:, 1:][real]
        mine = model.mlm_logits(ours)[..., list(toks.src.ids.aiayn_of)][real]
    assert_logits_close(mine, theirs)


def test_import_gives_berts_classifier_logits(bert_dirs):
    hf_dir, ours = bert_dirs
    _compare_classifier(*_hf(hf_dir), ours)


def test_import_gives_berts_mlm_logits(bert_mlm_dirs):
    hf_dir, ours = bert_mlm_dirs
    _compare_mlm(*_hf(hf_dir, mlm=True), ours)


@pytest.mark.parametrize("mlm", [False, True])
def test_export_gives_aiayns_logits_and_round_trip_tensors(bert_dirs, bert_mlm_dirs, tmp_path, mlm):
    hf_dir, ours = bert_mlm_dirs if mlm else bert_dirs
    out = export_hf(ours, tmp_path / "back")
    assert_same_tensors(hf_dir, out)
    (_compare_mlm if mlm else _compare_classifier)(*_hf(out, mlm), ours)


def test_export_refuses_an_mlm_model_with_a_relu_ffn(bert_mlm_dirs, tmp_path):
    """Its MLM head's GELU and its FFN's ReLU are two activations; BERT's hidden_act is one."""
    import shutil

    _, ours = bert_mlm_dirs
    relu = shutil.copytree(ours, tmp_path / "relu")
    config = json.loads((relu / "config.json").read_text())
    (relu / "config.json").write_text(json.dumps({**config, "activation": "relu"}))
    with pytest.raises(ValueError, match="activation = 'relu' has no BERT counterpart in an MLM model"):
        export_hf(relu, tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_tokenizer_ids_equal_berts_on_1000_lines(bert_dirs):
    hf_dir, ours = bert_dirs
    _, tok = _hf(hf_dir)
    side = load_tokenizers(ours).src
    texts = [line.split("\t")[0] for line in lines("sst2/train_full.tsv.gz", 1000, skip=2000)]
    theirs = tok(texts)["input_ids"]
    assert [[tok.cls_token_id] + side.hf_ids(side.encode(t)) for t in texts] == theirs
    assert [side.decode(side.encode(t)) for t in texts] == tok.batch_decode(theirs, skip_special_tokens=True)


def test_truncation_and_padding_saved_in_tokenizer_json_are_off_as_in_transformers(bert_dirs, tmp_path):
    """A tokenizer.json saved with truncation at 6 and padding to 10: transformers encodes whole texts, and
    so must the import; it cut them silently (past the doors' count of cut inputs) and padded inside the ids."""
    import shutil

    from tokenizers import Tokenizer

    from aiayn.interop.hf import import_hf

    hf_dir = shutil.copytree(bert_dirs[0], tmp_path / "hf")
    backend = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    backend.enable_truncation(6)
    backend.enable_padding(length=10)
    backend.save(str(hf_dir / "tokenizer.json"))
    _, tok = _hf(hf_dir)
    side = load_tokenizers(import_hf(hf_dir, tmp_path / "ours")).src
    assert [[tok.cls_token_id] + side.hf_ids(side.encode(t)) for t in TEXTS] == tok(TEXTS)["input_ids"]
    assert len(side.encode(TEXTS[1])) > 6


def test_classify_door_gives_berts_probabilities(bert_dirs):
    import aiayn

    hf_dir, ours = bert_dirs
    hf, tok = _hf(hf_dir)
    with torch.no_grad():
        probs = hf(**tok(TEXTS, return_tensors="pt", padding=True)).logits.softmax(-1)
    out = aiayn.load_pipeline(ours)(TEXTS)
    assert [label for label, _ in out] == [hf.config.id2label[int(i)] for i in probs.argmax(-1)]
    assert [p for _, p in out] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)
    assert aiayn.load_pipeline(ours).attention(TEXTS[0]).describe()


def test_mlm_masks_with_berts_mask_token_not_its_sep(bert_mlm_dirs):
    from transformers import AutoTokenizer

    from aiayn.tasks.mlm import mask_id_of

    hf_dir, ours = bert_mlm_dirs
    theirs = AutoTokenizer.from_pretrained(hf_dir)
    toks = load_tokenizers(ours)
    assert toks.src.encode("[MASK]")[-1] != toks.src.ids.aiayn_of[theirs.mask_token_id]  # the trap: [SEP] comes last
    assert mask_id_of(toks.src) == toks.src.ids.aiayn_of[theirs.mask_token_id]


def _broken_copy(bert_dirs, tmp_path, edit):
    import shutil

    hf_dir = shutil.copytree(bert_dirs[0], tmp_path / "hf")
    config = json.loads((hf_dir / "config.json").read_text())
    edit(hf_dir, config)
    (hf_dir / "config.json").write_text(json.dumps(config))
    return hf_dir


@pytest.mark.parametrize("edit, message", [
    (lambda d, c: (d / "tokenizer_config.json").write_text("{bad"), r"tokenizer_config.json: not valid JSON"),
    (lambda d, c: c.pop("hidden_size"), r"config.json: hidden_size must be a positive whole number, got nothing"),
    (lambda d, c: c.update(num_hidden_layers="2"), r"config.json: num_hidden_layers must be a positive whole number, got '2'"),
    (lambda d, c: c.update(id2label={"0": "neg", "2": "pos"}), r"config.json: id2label must map every id 0..n-1"),
    (lambda d, c: (d / "model.safetensors.index.json").write_text("{}"), r"model.safetensors.index.json: no 'weight_map'"),
    (lambda d, c: (d / "tokenizer.json").write_text('{"version": "1.0",'), r"tokenizer.json: not a Hugging Face tokenizer"),
])
def test_a_malformed_checkpoint_is_an_error_naming_its_file(bert_dirs, tmp_path, edit, message):
    from aiayn.interop.hf import import_hf

    with pytest.raises((ValueError, FileNotFoundError), match=message):
        import_hf(_broken_copy(bert_dirs, tmp_path, edit), tmp_path / "out")
    assert not (tmp_path / "out").exists()

