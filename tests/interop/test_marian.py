"""Marian <-> aiayn's encoder-decoder: logits, the round trip, the tokenizer, decoding and the doors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from hf_checkpoints import assert_logits_close, assert_same_tensors, lines, marian
from aiayn.config import BOS_ID, EOS_ID, TransformerConfig
from aiayn.data.tokenizer import load_tokenizers
from aiayn.decoding.common import pad_sources
from aiayn.interop import export_hf, import_hf
from aiayn.models import Transformer, load_model

SOURCES = ["Ein Hund läuft im Park.", "Zwei Männer spielen Fußball auf dem grünen Rasen, während es regnet."]
TARGETS = ["A dog runs in the park.", "Two men play soccer."]


def _hf(directory):
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(directory).eval(), MarianTokenizer.from_pretrained(directory)


def _hf_logits(hf, tok) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Marian's teacher-forced logits (B, T, V) of a padded batch, and its source and decoder inputs."""
    b = tok(SOURCES, text_target=TARGETS, return_tensors="pt", padding=True)
    start = torch.full((len(SOURCES), 1), hf.config.decoder_start_token_id)
    decoder_in = torch.cat([start, b["labels"][:, :-1]], 1)
    with torch.no_grad():
        logits = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], decoder_input_ids=decoder_in).logits
    return logits, b["input_ids"], decoder_in


def _our_logits(model, toks, src_hf: torch.Tensor, tgt_hf: torch.Tensor, pad: int) -> torch.Tensor:
    """aiayn's logits on the same inputs, ids renamed, columns back in Marian's order."""
    src = pad_sources([toks.src.ids.to_aiayn([i for i in row if i != pad]) for row in src_hf.tolist()], 0)
    tgt = torch.tensor([toks.tgt.ids.to_aiayn(row) for row in tgt_hf.tolist()])
    with torch.no_grad():
        logits = model(src, tgt)
    return logits[..., list(toks.tgt.ids.aiayn_of)]


def test_import_gives_marians_logits(marian_dirs):
    hf_dir, ours = marian_dirs
    hf, tok = _hf(hf_dir)
    theirs, src, tgt = _hf_logits(hf, tok)
    model, toks = load_model(ours), load_tokenizers(ours)
    assert model.config.activation == "silu" and model.config.sinusoid_layout == "halves"
    assert_logits_close(_our_logits(model, toks, src, tgt, hf.config.pad_token_id), theirs)


def test_export_gives_aiayns_logits_and_round_trip_tensors(marian_dirs, tmp_path):
    hf_dir, ours = marian_dirs
    out = export_hf(ours, tmp_path / "back")
    assert_same_tensors(hf_dir, out)
    hf, tok = _hf(out)
    theirs, src, tgt = _hf_logits(hf, tok)
    assert_logits_close(_our_logits(load_model(ours), load_tokenizers(ours), src, tgt, hf.config.pad_token_id), theirs)


def test_an_untied_output_keeps_the_sides_embeddings_in_and_out(marian_dirs, tmp_path):
    """tie_word_embeddings false: transformers 5 computes with model.{encoder,decoder}.embed_tokens,
    matrices of their own beside model.shared; the import reads them, the export writes them."""
    from transformers import MarianConfig, MarianMTModel

    hf_dir, _ = marian_dirs
    untied = tmp_path / "hf"
    shutil.copytree(hf_dir, untied)
    fields = {**json.loads((untied / "config.json").read_text()), "tie_word_embeddings": False}
    config = MarianConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "transformers_version",
                                                                           "model_type")})
    torch.manual_seed(3)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)
        model.lm_head.weight.normal_(0, 0.3)
    model.save_pretrained(untied)
    ours = import_hf(untied, tmp_path / "ours")
    hf, tok = _hf(untied)
    theirs, src, tgt = _hf_logits(hf, tok)
    mine = _our_logits(load_model(ours), load_tokenizers(ours), src, tgt, hf.config.pad_token_id)
    assert_logits_close(mine, theirs)
    back, tok = _hf(export_hf(ours, tmp_path / "back"))
    assert_logits_close(mine, _hf_logits(back, tok)[0])


def test_an_aiayn_trained_model_exports_as_marian(tmp_path, shared_data):  # shared_data: skips without ../shared
    """Interleaved sinusoids (the paper's), ReLU, aiayn's own sentencepiece: the residual stream is permuted
    into Marian's [sin | cos] layout, and Marian gives aiayn's logits."""
    from transformers import MarianMTModel, MarianTokenizer

    from aiayn.data.tokenizer import SentencePieceTokenizer, TokenizerPair, save_tokenizers
    from aiayn.tasks import write_task_info

    sp = SentencePieceTokenizer.train(lines("multi30k/train.de.gz", 300) + lines("multi30k/train.en.gz", 300),
                                      vocab_size=500, num_threads=1)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=sp.vocab_size, dropout=0.0)).eval()
    model.save_pretrained(tmp_path / "ours")
    save_tokenizers(TokenizerPair.shared(sp), tmp_path / "ours")
    write_task_info(tmp_path / "ours", {"task": "translation", "languages": ["de", "en"]})
    out = export_hf(tmp_path / "ours", tmp_path / "hf")
    hf, tok = MarianMTModel.from_pretrained(out).eval(), MarianTokenizer.from_pretrained(out)
    pad = hf.config.pad_token_id
    to_ours = lambda h: BOS_ID if h == pad else EOS_ID if h == 0 else h + 2  # noqa: E731  (unk 1 -> 3, pieces 2.. -> 4..)
    assert [to_ours(h) for h in tok(SOURCES[0])["input_ids"]] == sp.encode(SOURCES[0]) + [EOS_ID]
    theirs, src, tgt = _hf_logits(hf, tok)
    src_ours = pad_sources([[to_ours(h) for h in row if h != pad] for row in src.tolist()], 0)
    tgt_ours = torch.tensor([[to_ours(h) for h in row] for row in tgt.tolist()])
    with torch.no_grad():
        logits = model(src_ours, tgt_ours)
    keep = [EOS_ID, 3] + list(range(4, sp.vocab_size)) + [BOS_ID]  # Marian's order: eos, unk, pieces, pad
    assert_logits_close(logits[..., keep], theirs)


def test_tokenizer_ids_equal_marians_on_1000_lines(marian_dirs):
    hf_dir, ours = marian_dirs
    _, tok = _hf(hf_dir)
    toks = load_tokenizers(ours)
    for side, name in ((toks.src, "multi30k/train.de.gz"), (toks.tgt, "multi30k/train.en.gz")):
        texts = lines(name, 1000, skip=2000)
        theirs = tok(texts)["input_ids"] if side is toks.src else tok(text_target=texts)["input_ids"]
        ours_ids = [side.hf_ids(side.encode(t)) + [tok.eos_token_id] for t in texts]  # aiayn appends EOS later
        assert ours_ids == theirs
        assert [side.decode(side.encode(t)) for t in texts[:200]] == tok.batch_decode(theirs[:200], skip_special_tokens=True)


def _parity(hf_dir, ours, sources, alpha: float, early_stopping, max_new: int = 30):
    """aiayn's beam search (through `aiayn translate`'s pipeline) and Marian's generate on `sources`: texts."""
    import aiayn

    hf, tok = _hf(hf_dir)
    hf.generation_config.forced_eos_token_id = None  # aiayn does not force EOS at the length limit
    b = tok(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = hf.generate(**b, num_beams=4, length_penalty=alpha, max_new_tokens=max_new, early_stopping=early_stopping,
                          bad_words_ids=[[hf.config.pad_token_id]], do_sample=False)
    theirs = tok.batch_decode(out, skip_special_tokens=True)
    pipe = aiayn.load_pipeline(ours)
    mine = pipe(sources, beam_size=4, length_penalty=alpha, length_penalty_form="plain", max_len_a=0.0,
                max_len_b=max_new)
    return mine, theirs


def test_beam_search_equals_generate(marian_dirs):
    """Random weights: every hypothesis runs to the length limit, where both searches end the same way."""
    sources = lines("multi30k/train.de.gz", 10, skip=1000)
    mine, theirs = _parity(*marian_dirs, sources, 0.0, False, max_new=12)
    assert mine == theirs


@pytest.fixture(scope="module")
def trained_marian(tmp_path_factory):
    """A Marian trained a little (400 steps), so that beam search has real choices of length."""
    root = tmp_path_factory.mktemp("marian-trained")
    hf = marian(root / "hf", d_model=32, d_ff=64, train_steps=400)
    return hf, import_hf(hf, root / "aiayn")


@pytest.mark.slow
@pytest.mark.parametrize("alpha, early_stopping", [(0.0, False), (0.6, "never")])
def test_beam_4_parity_on_100_sentences(trained_marian, alpha, early_stopping):
    """Beam 4 on 100 sentences: `aiayn translate` == MarianMTModel.generate, where the two searches are
    defined alike: Hugging Face's length penalty is aiayn's "plain" form, |Y|^α with |Y| the generated
    tokens, EOS included; with α > 0 its default early stopping (False) assumes that no longer
    hypothesis can win, so early_stopping="never" is the exact search that aiayn does."""
    sources = lines("multi30k/train.de.gz", 100)
    mine, theirs = _parity(*trained_marian, sources, alpha, early_stopping)
    assert mine == theirs
    assert len({len(t.split()) for t in theirs}) > 5  # outputs of many lengths: the searches were tested


def test_imported_directory_through_the_doors(marian_dirs, tmp_path):
    """`aiayn translate` (the CLI), `load_pipeline`, `aiayn plot attention`'s data and `aiayn export
    ctranslate2` (its greedy outputs equal ours) on the imported directory."""
    pytest.importorskip("ctranslate2")
    import aiayn
    from aiayn.cli import main

    _, ours = marian_dirs
    info = json.loads((ours / "task.json").read_text())
    assert info["task"] == "translation" and info["languages"] == ["de", "en"]
    src = tmp_path / "src.de"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    assert main(["translate", str(ours), "-i", str(src), "-o", str(tmp_path / "hyp"), "--max-len-b", "8"]) == 0
    cli = (tmp_path / "hyp").read_text(encoding="utf-8").splitlines()
    pipe = aiayn.load_pipeline(ours)
    assert cli == pipe(SOURCES, max_len_b=8)
    assert pipe.attention(SOURCES[0], max_len_b=4).describe()
    assert main(["export", "ctranslate2", str(ours), str(tmp_path / "ct2")]) == 0
    ct2 = aiayn.load_pipeline(tmp_path / "ct2", backend="ctranslate2")
    assert ct2(SOURCES, method="greedy", max_len_b=8) == pipe(SOURCES, method="greedy", max_len_b=8)


def test_unmapped_config_field_is_refused_in_one_line(marian_dirs, tmp_path):
    import shutil

    hf_dir, _ = marian_dirs
    copy = tmp_path / "odd"
    shutil.copytree(hf_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config["decoder_attention_heads"] = 1
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"decoder_attention_heads = 1 does not map") as e:
        import_hf(copy, tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, value, more", [("copy_attention", True, {}), ("source_positions", "end", {}),
                                                 ("norm_first", True, {}),
                                                 ("source_units", "sentences", {"sentence_ends": (5,)})])
def test_export_refuses_options_without_a_marian_counterpart(tmp_path, option, value, more):
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers

    tok = SymbolTokenizer(["a", "b", "c"])
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=tok.vocab_size, **{option: value}, **more))
    model.save_pretrained(tmp_path / "m")
    save_tokenizers(TokenizerPair.shared(tok), tmp_path / "m")
    with pytest.raises(ValueError, match=rf"{option} = {value!r} has no Marian counterpart"):
        export_hf(tmp_path / "m", tmp_path / "hf")


def _with_decode(ours, directory, **decode):
    """A copy of the model directory `ours` whose task.json decodes with `decode`."""
    shutil.copytree(ours, directory)
    info = json.loads((directory / "task.json").read_text())
    (directory / "task.json").write_text(json.dumps({**info, "decode": {**info["decode"], **decode}}))
    return directory


def test_exported_generation_config_decodes_as_task_json_says(marian_dirs, tmp_path):
    """task.json's greedy search, no_repeat_ngram_size and min_len reach generation_config.json: Marian's
    generate with the exported settings alone equals `aiayn translate`; an import reads them back. Before,
    the export wrote task.json's beam size only (4 beams here), and generate decoded otherwise."""
    import aiayn

    decode = {"method": "greedy", "beam_size": 4, "no_repeat_ngram_size": 2, "min_len": 3}
    ours = _with_decode(marian_dirs[1], tmp_path / "ours", **decode)
    hf, tok = _hf(export_hf(ours, tmp_path / "hf"))
    hf.generation_config.forced_eos_token_id = None  # aiayn does not force EOS at the length limit
    sources = lines("multi30k/train.de.gz", 10, skip=1000)
    with torch.no_grad():
        out = hf.generate(**tok(sources, return_tensors="pt", padding=True), max_new_tokens=12)
    mine = aiayn.load_pipeline(ours)(sources, max_len_a=0.0, max_len_b=12)
    assert mine == tok.batch_decode(out, skip_special_tokens=True)
    with torch.no_grad():  # the old export's settings (beam 4, nothing else) decode otherwise: the test can fail
        old = hf.generate(**tok(sources, return_tensors="pt", padding=True), max_new_tokens=12, num_beams=4,
                          no_repeat_ngram_size=0, min_new_tokens=0)
    assert mine != tok.batch_decode(old, skip_special_tokens=True)
    back = json.loads((import_hf(tmp_path / "hf", tmp_path / "back") / "task.json").read_text())["decode"]
    assert (back["beam_size"], back["no_repeat_ngram_size"], back["min_len"]) == (1, 2, 3)


def test_export_says_which_decoding_settings_hugging_face_lacks(marian_dirs, tmp_path, caplog):
    ours = _with_decode(marian_dirs[1], tmp_path / "ours", method="sample", beam_size=2, nbest=2,
                        length_penalty_form="gnmt")
    with caplog.at_level("WARNING", logger="aiayn.interop.marian"):
        generation = json.loads((export_hf(ours, tmp_path / "hf") / "generation_config.json").read_text())
    assert (generation["do_sample"], generation["top_k"], generation["num_beams"]) == (True, 0, 1)
    assert "GNMT length penalty" in caplog.text and "nbest 2" in caplog.text


@pytest.mark.parametrize("export", ["hf", "ctranslate2"])
def test_a_bad_decode_setting_in_task_json_is_refused_by_the_export(marian_dirs, tmp_path, capsys, export):
    """A string beam size: `aiayn translate` refused the directory, the exports copied it into their output."""
    from aiayn.cli import main

    if export == "ctranslate2":
        pytest.importorskip("ctranslate2")
    ours = _with_decode(marian_dirs[1], tmp_path / "ours", beam_size="4")
    assert main(["export", export, str(ours), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{ours / 'task.json'}: bad decode settings" in err and "beam_size" in err, err
    assert not (tmp_path / "out").exists()


def test_an_export_without_its_tokenizer_is_refused_naming_the_file(marian_dirs, tmp_path, capsys):
    from aiayn.cli import main

    ours = _with_decode(marian_dirs[1], tmp_path / "ours")
    (ours / "tokenizer.json").unlink()
    assert main(["export", "hf", str(ours), str(tmp_path / "out")]) == 2
    assert f"{ours / 'tokenizer.json'}: not found" in capsys.readouterr().err


def test_weights_the_config_does_not_describe_are_refused(marian_dirs, tmp_path):
    """A config of 1 layer over 2 layers' weights: the second would be dropped without a word."""
    hf_dir, _ = marian_dirs
    fewer = shutil.copytree(hf_dir, tmp_path / "hf")
    config = json.loads((fewer / "config.json").read_text())
    (fewer / "config.json").write_text(json.dumps({**config, "encoder_layers": config["encoder_layers"] - 1}))
    with pytest.raises(ValueError, match=r"tensors of the checkpoint map onto nothing in aiayn's model "
                                         r"\(model.encoder.layers.1.[^)]*\); does config.json describe these weights"):
        import_hf(fewer, tmp_path / "ours")
    assert not (tmp_path / "ours").exists()


def test_a_multilingual_model_keeps_its_directions_and_tag_through_export_and_import(marian_dirs, tmp_path):
    from aiayn.tasks import load_pipeline

    _, ours = marian_dirs
    multi = shutil.copytree(ours, tmp_path / "multi")
    info = json.loads((multi / "task.json").read_text())
    kept = {"target_tag": "<2{}>", "directions": [["de", "en"], ["de", "fr"]]}
    (multi / "task.json").write_text(json.dumps({**{k: v for k, v in info.items() if k != "imported_from"}, **kept}))
    back = import_hf(export_hf(multi, tmp_path / "hf"), tmp_path / "again")
    again = json.loads((back / "task.json").read_text())
    assert {k: again[k] for k in kept} == kept
    assert load_pipeline(back).directions() == (("de", "en"), ("de", "fr"))


def test_a_decoder_size_other_than_the_encoders_names_both_fields(marian_dirs, tmp_path):
    hf_dir, _ = marian_dirs
    odd = shutil.copytree(hf_dir, tmp_path / "hf")
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "decoder_attention_heads": 2 * config["encoder_attention_heads"]}))
    with pytest.raises(ValueError, match=r"decoder_attention_heads = 4 does not map onto aiayn \(aiayn's model has one "
                                         r"value for both, so it must equal encoder_attention_heads = 2\)"):
        import_hf(odd, tmp_path / "ours")
