"""`aiayn import hf` and `aiayn export hf` from the command line: the round trip, and one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from hf_checkpoints import assert_same_tensors
from aiayn.cli import main


def test_import_then_export_from_the_command_line(gpt2_dirs, tmp_path, capsys):
    hf_dir, _ = gpt2_dirs
    assert main(["import", "hf", str(hf_dir), str(tmp_path / "ours")]) == 0
    assert json.loads((tmp_path / "ours" / "task.json").read_text())["task"] == "lm"
    assert main(["export", "hf", str(tmp_path / "ours"), str(tmp_path / "back")]) == 0
    assert "imported" in capsys.readouterr().out
    assert_same_tensors(hf_dir, tmp_path / "back")


def test_unknown_model_type_and_pickled_weights_are_one_line_errors(gpt2_dirs, tmp_path, capsys):
    hf_dir, _ = gpt2_dirs
    odd = tmp_path / "odd"
    shutil.copytree(hf_dir, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    assert main(["import", "hf", str(odd), str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "model_type = 'llama' does not map onto aiayn" in err and err.count("\n") == 1
    (odd / "model.safetensors").rename(odd / "pytorch_model.bin")
    assert main(["import", "hf", str(odd), str(tmp_path / "a")]) == 2
    assert "pytorch_model.bin is pickled and never read" in capsys.readouterr().err


def test_export_refuses_a_tokenizer_without_a_counterpart(tmp_path, capsys):
    from aiayn.data.tokenizer import CharTokenizer, TokenizerPair, save_tokenizers
    from aiayn.models import DecoderOnly, DecoderOnlyConfig

    tok = CharTokenizer.from_text("hello world")
    DecoderOnly(DecoderOnlyConfig(vocab_size=tok.vocab_size, d_model=8, n_heads=2, n_layers=1, d_ff=16)).save_pretrained(
        tmp_path / "m")
    save_tokenizers(TokenizerPair.shared(tok), tmp_path / "m")
    assert main(["export", "hf", str(tmp_path / "m"), str(tmp_path / "hf")]) == 2
    assert "a chars tokenizer has no GPT-2 counterpart" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def test_import_and_export_replace_only_their_own_earlier_output(gpt2_dirs, tmp_path, capsys):
    """An earlier import (an aiayn directory) or export (a Hugging Face one) is replaced; the other kind, a
    trained model, a downloaded Hugging Face checkpoint, a non-empty directory, or the input itself is
    refused and left as it was."""
    hf_dir, _ = gpt2_dirs
    ours, back = tmp_path / "ours", tmp_path / "back"
    assert main(["import", "hf", str(hf_dir), str(ours)]) == 0
    assert main(["import", "hf", str(hf_dir), str(ours)]) == 0  # its own earlier output
    assert main(["export", "hf", str(ours), str(back)]) == 0
    assert main(["export", "hf", str(ours), str(back)]) == 0
    before = {p.name: p.read_bytes() for p in ours.iterdir()}
    for argv, refused in ((["export", "hf", str(ours), str(ours)], "is, or holds, an input"),
                          (["import", "hf", str(hf_dir), str(back)], "is not an earlier import"),
                          (["import", "hf", str(hf_dir), str(hf_dir)], "is, or holds, an input")):
        assert main(argv) == 2
        assert refused in capsys.readouterr().err
    trained, downloaded = tmp_path / "trained", tmp_path / "downloaded"
    shutil.copytree(ours, trained)  # an aiayn model not written by an import
    info = json.loads((trained / "task.json").read_text())
    (trained / "task.json").write_text(json.dumps({k: v for k, v in info.items() if k != "imported_from"}))
    shutil.copytree(hf_dir, downloaded)  # a Hugging Face model not written by an export
    for argv, refused in ((["import", "hf", str(hf_dir), str(trained)], "is not an earlier import"),
                          (["export", "hf", str(ours), str(downloaded)], "is not an earlier export")):
        kept = {p.name: p.read_bytes() for p in Path(argv[-1]).iterdir()}
        assert main(argv) == 2
        assert refused in capsys.readouterr().err
        assert {p.name: p.read_bytes() for p in Path(argv[-1]).iterdir()} == kept
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    assert main(["export", "hf", str(ours), str(other)]) == 2
    assert "is not an earlier export" in capsys.readouterr().err
    assert main(["export", "hf", str(ours), str(tmp_path / "back2")]) == 0
    shutil.copy(ours / "config.json", tmp_path / "back2" / "config.json")  # now an aiayn config: not an export's
    assert main(["export", "hf", str(ours), str(tmp_path / "back2")]) == 2
    assert {p.name: p.read_bytes() for p in ours.iterdir()} == before and (other / "notes.txt").read_text() == "keep"
    assert_same_tensors(hf_dir, back)


def edited_copy(hf_dir, directory, drop=(), **fields):
    """A copy of a Hugging Face directory with config.json's `fields` set and `drop` removed."""
    shutil.copytree(hf_dir, directory)
    config = {k: v for k, v in json.loads((directory / "config.json").read_text()).items() if k not in drop}
    (directory / "config.json").write_text(json.dumps({**config, **fields}))
    return directory


@pytest.mark.parametrize("family, fields, drop, message", [
    ("gpt2", {"architectures": ["GPT2ForSequenceClassification"]}, (), "architectures = .*aiayn imports GPT2LMHeadModel"),
    ("vit", {"architectures": ["ViTForMaskedImageModeling"]}, (), "aiayn imports ViTForImageClassification"),
    ("marian", {"architectures": ["MarianForCausalLM"]}, (), "aiayn imports MarianMTModel"),
    ("bert", {"problem_type": "multi_label_classification"}, (), "problem_type = .*picks one label by a softmax"),
    ("bert", {"num_labels": 1, "id2label": {"0": "score"}, "label2id": {"score": 0}}, (), "num_labels = 1"),
    ("marian", {}, ("pad_token_id", "decoder_start_token_id"), "pad_token_id must be a token id .*got nothing"),
    ("bert", {"id2label": None, "num_labels": "3"}, (), "num_labels must be a positive whole number, got '3'"),
    ("gpt2", {"resid_pdrop": "0.1"}, (), "dropout must be a number"),  # aiayn's model config refuses it
    ("bert", {"max_position_embeddings": None}, (), "max_positions must be an integer, got None"),
])
def test_a_checkpoint_aiayn_would_misread_is_refused_naming_its_config(request, family, fields, drop, message, tmp_path,
                                                                        capsys):
    """Another head on a known body, a multi-label or regression classifier, a Marian without its special ids:
    each imported without a word before (the head dropped, a softmax where sigmoids were, broken ids). A value
    of the wrong type: a traceback, or an error that did not name config.json."""
    hf_dir, _ = request.getfixturevalue(f"{family}_dirs")
    odd = edited_copy(hf_dir, tmp_path / "odd", drop, **fields)
    assert main(["import", "hf", str(odd), str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and str(odd / "config.json") in err, err


def test_a_marian_without_num_beams_decodes_greedily_as_hugging_face_does(marian_dirs, tmp_path):
    hf_dir, _ = marian_dirs
    odd = edited_copy(hf_dir, tmp_path / "odd", drop=("num_beams",))
    (odd / "generation_config.json").unlink(missing_ok=True)
    assert main(["import", "hf", str(odd), str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "task.json").read_text())["decode"]["beam_size"] == 1


def test_a_gpt2_export_of_a_model_without_a_logits_bias(gpt2_dirs, tmp_path):
    """`logits_bias` is an import's (GPT-2's absent ids); a model trained without one exported with a KeyError."""
    import dataclasses

    from aiayn.models import DecoderOnly, load_model

    _, ours = gpt2_dirs
    model = load_model(ours)
    plain = DecoderOnly(dataclasses.replace(model.config, logits_bias=False))
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "logits_bias"})
    shutil.copytree(ours, tmp_path / "plain")
    plain.save_pretrained(tmp_path / "plain")
    assert main(["export", "hf", str(tmp_path / "plain"), str(tmp_path / "back")]) == 0
    assert_same_tensors(gpt2_dirs[0], tmp_path / "back")  # the same weights: GPT-2 has no bias either way


def test_an_output_that_holds_the_input_is_refused(gpt2_dirs, tmp_path, capsys):
    """`aiayn import hf m2/hf m2` replaced m2, and m2/hf, the input, with it."""
    _, ours = gpt2_dirs
    shutil.copytree(ours, tmp_path / "m2")
    assert main(["export", "hf", str(tmp_path / "m2"), str(tmp_path / "m2" / "hf")]) == 0
    assert main(["import", "hf", str(tmp_path / "m2" / "hf"), str(tmp_path / "m2")]) == 2
    assert "is, or holds, an input" in capsys.readouterr().err and (tmp_path / "m2" / "hf" / "config.json").is_file()


def test_a_damaged_weights_file_is_a_one_line_error_naming_it(gpt2_dirs, tmp_path, capsys):
    hf_dir, _ = gpt2_dirs
    odd = edited_copy(hf_dir, tmp_path / "odd")
    (odd / "model.safetensors").write_bytes(b"\xff" * 64)
    assert main(["import", "hf", str(odd), str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert f"{odd / 'model.safetensors'}: cannot read its tensor names" in err and err.count("\n") == 1
