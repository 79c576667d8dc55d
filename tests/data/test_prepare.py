from __future__ import annotations

import pytest

from aiayn.cli import main
from aiayn.data import load_tokenizers


def test_prepare_trains_saves_and_caches(multi30k_dir, tmp_path, capsys):
    argv = ["prepare", "multi30k", "--langs", "de", "en", "--out", str(tmp_path / "model"), "--splits", "val",
            "--vocab-size", "1000", "--data-dir", str(multi30k_dir), "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "trained joint bpe vocabulary (1000 pieces)" in out and "written" in out
    pair = load_tokenizers(tmp_path / "model")
    assert pair.joint and pair.src.vocab_size == 1000
    assert main(argv) == 2  # --vocab-size again, for the vocabulary already there: it would be ignored
    assert "--vocab-size: settings of a new vocabulary, but" in capsys.readouterr().err
    reuse = [a for a in argv if a not in ("--vocab-size", "1000")]
    assert main(reuse) == 0
    out = capsys.readouterr().out
    assert "using the existing vocabulary" in out and "hit" in out
    assert main([*reuse, "--model-type", "unigram", "--separate-vocab"]) == 2
    assert "--model-type --separate-vocab: settings of a new vocabulary" in capsys.readouterr().err


def test_prepare_reports_bad_input(tmp_path, capsys):
    assert main(["prepare", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "m")]) == 2
    assert "missing.tsv" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_prepare_never_writes_a_vocabulary_beside_a_models_weights(tmp_path, capsys):
    """--retrain --out MODEL_DIR replaced the trained model's vocabulary: the model then refused to load."""
    from aiayn.config import TransformerConfig
    from aiayn.models import Transformer

    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"a b {i}\tc d {i}\n" for i in range(50)))
    model = tmp_path / "model"
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=20)).save_pretrained(model)
    before = {p.name for p in model.iterdir()}
    assert main(["prepare", str(corpus), "--out", str(model), "--retrain", "--vocab-size", "30"]) == 2
    assert f"{model}: holds a model, whose vocabulary is part of it" in capsys.readouterr().err
    assert {p.name for p in model.iterdir()} == before


def corpus_of(tmp_path, n: int = 50):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"a b {i}\tc d {i}\n" for i in range(n)))
    return corpus


@pytest.mark.parametrize("seed", ["-1", str(2**32), "99999999999"])
def test_prepare_takes_the_seeds_aiayn_train_takes(tmp_path, capsys, seed):
    """A seed outside train.seed's range was a TypeError from sentencepiece (exit 1): it is train.seed's own
    check, before any reading; 2**32 - 1 is still taken."""
    assert main(["prepare", str(corpus_of(tmp_path)), "--out", str(tmp_path / "v"), "--seed", seed]) == 2
    assert capsys.readouterr().err == (f"aiayn prepare: error: --seed: train.seed must be from 0 to 2**32 - 1 "
                                       f"(numpy's range), got {seed}\n")
    assert not (tmp_path / "v").exists()
    assert main(["prepare", str(corpus_of(tmp_path)), "--out", str(tmp_path / "v"), "--seed", str(2**32 - 1),
                 "--vocab-size", "300", "--cache-dir", str(tmp_path / "cache")]) == 0


@pytest.mark.parametrize("size", ["0", "-3"])
def test_prepare_refuses_a_vocabulary_size_of_zero_or_less_as_given(tmp_path, capsys, size):
    """--vocab-size 0 was read as unset (8000), and sentencepiece then said the 8000 was too high."""
    assert main(["prepare", str(corpus_of(tmp_path)), "--out", str(tmp_path / "v"), "--vocab-size", size]) == 2
    assert capsys.readouterr().err == f"aiayn prepare: error: --vocab-size: data.vocab_size must be positive, got {size}\n"


@pytest.mark.parametrize("text", ["", "a b\t \n \tc d\n"])
def test_prepare_on_a_corpus_without_text_names_the_file(tmp_path, capsys, text):
    corpus = tmp_path / "empty.tsv"
    corpus.write_text(text)
    assert main(["prepare", str(corpus), "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aiayn prepare: error: {corpus}: no text to train a vocabulary on (") and "sentencepiece" not in err
    assert not (tmp_path / "v").exists()
