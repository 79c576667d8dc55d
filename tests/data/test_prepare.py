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
