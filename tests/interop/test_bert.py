"""BERT <-> aiayn's encoder-only model: classifier and MLM logits, the round trip, the tokenizer,
the classify door."""

from __future__ import annotations

import json

import numpy as np
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



# -- a bare body: BertModel, BertForPreTraining ------------------------------------------------------
def _body(bert_dirs, tmp_path, architecture: str = "BertModel"):
    """The tiny classifier's body saved as `architecture` (BertModel, or BertForPreTraining with random
    heads), with its tokenizer."""
    import shutil

    from transformers import BertForPreTraining, BertForSequenceClassification

    hf_dir = bert_dirs[0]
    classifier = BertForSequenceClassification.from_pretrained(hf_dir)
    out = tmp_path / architecture
    if architecture == "BertModel":
        classifier.bert.save_pretrained(out)
    else:
        whole = BertForPreTraining(classifier.config)
        whole.bert.load_state_dict(classifier.bert.state_dict())
        whole.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_dir / name, out / name)
    return out


def _states(hf_model, tok, ours_dir, texts):
    """(transformers' last_hidden_state at the real positions, ours) of `texts`, each (tokens, D)."""
    import aiayn

    b = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = hf_model(**b).last_hidden_state
    mine = aiayn.load_pipeline(ours_dir).embed(texts, pooling="none")
    return [t[m.bool()] for t, m in zip(theirs, b["attention_mask"])], [torch.from_numpy(x) for x in mine]


@pytest.mark.parametrize("architecture", ["BertModel", "BertForPreTraining"])
def test_a_bare_body_imports_as_an_encoder_whose_states_are_berts(bert_dirs, tmp_path, caplog, architecture):
    from transformers import AutoTokenizer, BertModel

    from aiayn.interop import import_hf

    hf_dir = _body(bert_dirs, tmp_path, architecture)
    with caplog.at_level("WARNING"):
        ours = import_hf(hf_dir, tmp_path / "ours")
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert bool(dropped and "cls.predictions, cls.seq_relationship" in dropped[0]) == (architecture == "BertForPreTraining")
    assert json.loads((ours / "task.json").read_text())["task"] == "embed"
    theirs, mine = _states(BertModel.from_pretrained(hf_dir).eval(), AutoTokenizer.from_pretrained(hf_dir), ours, TEXTS)
    for t, m in zip(theirs, mine):
        assert_logits_close(m, t)


def test_a_body_exports_back_as_bertmodel(bert_dirs, tmp_path):
    from aiayn.interop import import_hf

    hf_dir = _body(bert_dirs, tmp_path)
    out = export_hf(import_hf(hf_dir, tmp_path / "ours"), tmp_path / "back")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    assert_same_tensors(hf_dir, out)


# -- the real checkpoint: all-MiniLM-L6-v2 -----------------------------------------------------------
def _sst2_sentences(n: int) -> list[str]:
    return [line.split("\t")[0] for line in lines("sst2/train_full.tsv.gz", n, skip=30000)]


def test_minilm_tokenizes_as_transformers_and_masks_with_its_mask_token(minilm):
    from transformers import AutoTokenizer

    from aiayn.tasks.mlm import mask_id_of

    hf_dir, ours = minilm
    tok, side = AutoTokenizer.from_pretrained(hf_dir), load_tokenizers(ours).src
    texts = _sst2_sentences(1000) + ["Ünïcode Casing and ACCENTS", "[MASK] is a [MASK] token"]
    assert [[tok.cls_token_id] + side.hf_ids(side.encode(t)) for t in texts] == tok(texts)["input_ids"]
    assert side.hf_ids([mask_id_of(side)]) == [tok.mask_token_id]


def test_minilm_states_and_sentence_vectors_equal_transformers(minilm):
    """256 SST-2 phrases (benchmarks/embed_vs_hf.py measures 1,000): every token's state, and
    sentence-transformers' mean-pooled, normalised vector."""
    import aiayn
    from transformers import AutoTokenizer, BertModel

    hf_dir, ours = minilm
    texts = _sst2_sentences(256)
    theirs, mine = _states(BertModel.from_pretrained(hf_dir).eval(), AutoTokenizer.from_pretrained(hf_dir), ours, texts)
    assert max(float((t - m).abs().max()) for t, m in zip(theirs, mine)) < 1e-4
    mean = torch.stack([t.mean(0) for t in theirs])
    expected = torch.nn.functional.normalize(mean, dim=-1)
    vectors = torch.from_numpy(np.stack(aiayn.load_pipeline(ours).embed(texts)))  # task.json: mean, normalised
    torch.testing.assert_close(vectors, expected, atol=1e-5, rtol=0)


def test_a_classifier_fine_tuned_from_a_body_exports_as_berts_and_answers_alike_in_every_door(bert_dirs, tmp_path, capsys):
    """A BertModel imported, a classify run started from it (train.init_from: its architecture, vocabulary and
    pooler, a fresh classifier), exported back: transformers' BertForSequenceClassification gives its logits,
    and `aiayn classify`, the pipeline and /v1/classify its labels."""
    from fastapi.testclient import TestClient
    from transformers import AutoTokenizer, BertForSequenceClassification

    import aiayn
    from aiayn.cli import main
    from aiayn.interop import import_hf
    from aiayn.serve.app import create_app

    body = import_hf(_body(bert_dirs, tmp_path), tmp_path / "body")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = lines("sst2/train_full.tsv.gz", 48, skip=1)
    (corpus / "train.tsv").write_text("".join(r + "\n" for r in rows[:40]))
    (corpus / "val.tsv").write_text("".join(r + "\n" for r in rows[40:]))
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'task = "classify"\n[model]\ntype = "encoder-only"\npooler = true\n'
                      f'[data]\ncorpus = "{corpus}"\nmax_input_tokens = 32\n'
                      f'[train]\nrun_dir = "{tmp_path / "run"}"\ninit_from = "{body}"\nmax_updates = 2\n'
                      f'schedule = "constant"\nprogress = false\n[optim]\nlr_factor = 0.01\nwarmup_steps = 1\n')
    assert main(["train", str(recipe)]) == 0
    tuned = tmp_path / "run" / "model"
    out = export_hf(tuned, tmp_path / "back")
    hf, tok = BertForSequenceClassification.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    _compare_classifier(hf, tok, tuned)

    python = [label for label, _ in aiayn.load_pipeline(tuned)(TEXTS)]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in TEXTS))
    capsys.readouterr()
    assert main(["classify", str(tuned), "-i", str(tmp_path / "in.txt")]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == python
    with TestClient(create_app(tuned)) as client:
        served = client.post("/v1/classify", json={"text": TEXTS}).json()["labels"]
    assert [x["label"] for x in served] == python
