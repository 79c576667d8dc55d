from __future__ import annotations

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
