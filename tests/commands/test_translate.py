"""`aiayn translate` and `aiayn evaluate` end to end, through `aiayn.cli.main`."""

import io
import json
import logging
import sys

import pytest

from aiayn.cli import main
from aiayn.decoding.translator import Translator

LINES = ["a b c", "", "d e f g h i j", "zz ☃ a", "k", "   ", "b b b b"]
FAST = ["--beam-size", "2", "--max-len-b", "4", "--min-len", "2"]  # min-len: this untrained model says "" with beams


def with_stdin(monkeypatch, text: str):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))


def expected(model_dir):
    return Translator.from_pretrained(model_dir).translate(LINES, beam_size=2, max_len_b=4, min_len=2)


def test_stdin_to_stdout_keeps_lines_aligned(model_dir, monkeypatch, capsys):
    with_stdin(monkeypatch, "\n".join(LINES) + "\n")
    assert main(["translate", str(model_dir), *FAST]) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[:-1] == expected(model_dir) and out[-1] == ""
    assert out[1] == "" and out[5] == ""  # blank in, blank out
    filled = [o for i, o in enumerate(out[:-1]) if i not in (1, 5)]
    assert all(filled) and len(set(filled)) > 1  # real outputs, not one string for every line


def test_no_repeat_ngram_size_flag(model_dir, monkeypatch, capsys):
    options = dict(method="sample", seed=1, temperature=2.0, max_len_b=10)  # this untrained model says "" with beams
    with_stdin(monkeypatch, "\n".join(LINES) + "\n")
    flags = ["--method", "sample", "--seed", "1", "--temperature", "2.0", "--max-len-b", "10",
             "--device", "cpu"]  # as the Translator below: a GPU draws other random numbers
    assert main(["translate", str(model_dir), *flags, "--no-repeat-ngram-size", "1"]) == 0
    out = capsys.readouterr().out.split("\n")[:-1]
    translator = Translator.from_pretrained(model_dir)
    assert out == translator.translate(LINES, no_repeat_ngram_size=1, **options)
    assert out != translator.translate(LINES, **options)  # the flag changed something
    assert all(len(set(line.split())) == len(line.split()) for line in out)  # n = 1: no symbol twice


def test_min_len_flag(model_dir, monkeypatch, capsys):
    with_stdin(monkeypatch, "\n".join(LINES) + "\n")
    assert main(["translate", str(model_dir), "--beam-size", "2", "--max-len-b", "10", "--min-len", "7"]) == 0
    out = capsys.readouterr().out.split("\n")[:-1]
    translator = Translator.from_pretrained(model_dir)
    assert out == translator.translate(LINES, beam_size=2, max_len_b=10, min_len=7)
    assert out != translator.translate(LINES, beam_size=2, max_len_b=10)  # the flag changed something


def test_files_with_progress_bar(model_dir, tmp_path, capsys):
    src, hyp = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["translate", str(model_dir), "--input", str(src), "--output", str(hyp), *FAST]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{len(LINES)}/{len(LINES)}" in captured.err  # tqdm on stderr
    assert hyp.read_text(encoding="utf-8").split("\n")[:-1] == expected(model_dir)


def test_invalid_utf8_and_unknown_characters(model_dir, tmp_path, monkeypatch, capsys, caplog):
    """Invalid bytes are replaced, from a file and from stdin alike (issue 33 item 8); a file's first one is
    named in a warning (they were replaced without a word)."""
    src = tmp_path / "bad.txt"
    src.write_bytes(b"a \xff b\n\xe2\x98\x83\n")
    with caplog.at_level("WARNING", logger="aiayn.data.corpus"):
        assert main(["translate", str(model_dir), "-i", str(src), *FAST]) == 0
    assert f"{src}:1: invalid UTF-8 (invalid start byte at byte 2); it and every other" in caplog.text
    from_file = capsys.readouterr().out
    assert len(from_file.split("\n")) == 3
    assert from_file == "\n".join(Translator.from_pretrained(model_dir).translate(
        ["a \ufffd b", "\u2603"], beam_size=2, max_len_b=4, min_len=2)) + "\n"  # replaced, not dropped
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes()), encoding="utf-8"))
    assert main(["translate", str(model_dir), *FAST]) == 0
    assert capsys.readouterr().out == from_file


def test_overlong_line_warns(model_dir, monkeypatch, capsys, caplog):
    with_stdin(monkeypatch, "a b c d e f g h\n")
    with caplog.at_level(logging.WARNING):
        assert main(["translate", str(model_dir), "--max-input-tokens", "3", *FAST]) == 0
    assert any("truncated" in r.getMessage() for r in caplog.records)
    assert len(capsys.readouterr().out.split("\n")) == 2


def test_nbest_lines(model_dir, monkeypatch, capsys):
    with_stdin(monkeypatch, "a b\n\nc\n")
    assert main(["translate", str(model_dir), "--nbest", "2", *FAST]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "2", "2"]  # the blank line has one empty hypothesis
    assert float(rows[0][2]) >= float(rows[1][2])


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_bad_model_dir_is_a_clear_error(make, tmp_path, monkeypatch, capsys):
    path = tmp_path / "nope" if make == "missing" else tmp_path
    with_stdin(monkeypatch, "a\n")
    assert main(["translate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error" in err and str(path) in err and "Traceback" not in err


def test_evaluate_hypothesis_file(tmp_path, capsys):
    ref, hyp = tmp_path / "ref", tmp_path / "hyp"
    ref.write_text("the cat sat on the mat\na dog barks\n")
    hyp.write_text("the cat sat on the mat\na dog barked\n")
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(hyp), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 < result["bleu"] < 100 and 0 < result["chrf"] < 100
    assert "tok:13a" in result["bleu_signature"] and "nrefs:1" in result["chrf_signature"]
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(ref)]) == 0
    assert "BLEU = 100.00" in capsys.readouterr().out


def test_evaluate_drops_blank_references_and_refuses_a_line_without_any(tmp_path, capsys):
    """A blank reference line was a reference: a blank output matched it (SQuAD EM 66.67 on these three lines,
    where two are scored and one is right); sacreBLEU reads a blank one of two references as missing."""
    hyp, ref, second = tmp_path / "hyp", tmp_path / "ref", tmp_path / "ref2"
    hyp.write_text("garden\nkitchen\nhallway\n")
    ref.write_text("garden\nbedroom\n\n")
    second.write_text("office\nbedroom\nhallway\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metric", "squad", "--json"]) == 2
    assert f"{ref}:3: a blank reference; nothing to score" in capsys.readouterr().err
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--ref", str(second), "--metric", "squad",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["exact_match"] == round(200 / 3, 2)
    hyp.write_text("garden\nkitchen\n\n")
    second.write_text("office\nbedroom\n\n")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--ref", str(second), "--metric", "squad"]) == 2
    assert f"{ref}:3: a blank reference in every --ref file" in capsys.readouterr().err


def test_evaluate_model_and_line_count_mismatch(model_dir, tmp_path, capsys):
    src, ref, saved = tmp_path / "src", tmp_path / "ref", tmp_path / "saved"
    src.write_text("a b\nc d\n")
    ref.write_text("a b\nc d\n")
    assert main(["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(ref),
                 "--save-hyp", str(saved), "--json", *FAST]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["n_sentences"] == 2 and len(saved.read_text().splitlines()) == 2
    ref.write_text("a b\n")
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(src)]) == 2
    assert "2 lines" in capsys.readouterr().err


CR_TEXT = "a b\rc d\r\ne\rf\n\ng\n"  # 4 lines: a bare CR is inside a line, CRLF ends one
CR_LINES = ["a b\rc d", "e\rf", "", "g"]


def test_a_bare_cr_does_not_split_stdin_lines(model_dir, monkeypatch, capsys):
    with_stdin(monkeypatch, CR_TEXT)
    assert main(["translate", str(model_dir), *FAST]) == 0
    out = capsys.readouterr().out
    want = Translator.from_pretrained(model_dir).translate(CR_LINES, beam_size=2, max_len_b=4, min_len=2)
    assert out.split("\n") == [*want, ""] and "\r" not in out


def test_a_bare_cr_does_not_split_input_file_lines(model_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_bytes(CR_TEXT.encode("utf-8"))
    assert main(["translate", str(model_dir), "-i", str(src), *FAST]) == 0
    assert len(capsys.readouterr().out.split("\n")) == len(CR_LINES) + 1


def test_evaluate_counts_lines_at_newlines_only(tmp_path, capsys):
    ref, hyp = tmp_path / "ref", tmp_path / "hyp"
    ref.write_bytes(b"a b\r\nc d\r\ne\r\nf\r\n")
    hyp.write_bytes(CR_TEXT.encode("utf-8"))
    assert main(["evaluate", "--ref", str(ref), "--hyp", str(hyp), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["n_sentences"] == 4


def test_seeded_samples_are_the_same_from_stdin_chunks_and_a_file(model_dir, tmp_path, monkeypatch, capsys):
    import aiayn.commands.door as door

    text = "\n".join(LINES) + "\n"
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    sampling = ["--method", "sample", "--seed", "3", "--max-len-b", "6"]
    assert main(["translate", str(model_dir), "-i", str(src), *sampling]) == 0
    from_file = capsys.readouterr().out
    monkeypatch.setattr(door, "STDIN_CHUNK", 2)
    with_stdin(monkeypatch, text)
    assert main(["translate", str(model_dir), *sampling]) == 0
    assert capsys.readouterr().out == from_file


def test_nbest_without_beam_search_is_one_error_line(model_dir, monkeypatch, capsys):
    """The translator's rule (tests/decoding/test_translator.py) as the CLI says it."""
    with_stdin(monkeypatch, "a b\n")
    assert main(["translate", str(model_dir), "--nbest", "2", "--method", "greedy"]) == 2
    assert capsys.readouterr().err == ("aiayn translate: error: nbest 2 needs beam search with beam_size >= 2, "
                                       "got method 'greedy' with beam_size 4: greedy search (beam size 1) "
                                       "and sampling give one unscored output\n")


def decoding_fails(monkeypatch, message: str) -> None:
    """The translation pipeline fails the test if it is asked to decode (loading it is allowed:
    `evaluate --model` reads the task's metric from it before the checks)."""
    from aiayn.tasks.translation import TranslationPipeline

    monkeypatch.setattr(TranslationPipeline, "run", lambda *args, **kwargs: pytest.fail(message))


def test_evaluate_checks_line_counts_before_translating(model_dir, tmp_path, monkeypatch, capsys):
    src, ref = tmp_path / "src", tmp_path / "ref"
    src.write_text("a b\nc d\ne\n")
    ref.write_text("a b\nc d\n")
    decoding_fails(monkeypatch, "translated before checking")
    assert main(["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(ref)]) == 2
    assert capsys.readouterr().err == f"aiayn evaluate: error: {src} has 3 lines but {ref} has 2\n"


def test_evaluate_rejects_tokenize_for_another_metric_before_decoding(model_dir, tmp_path, monkeypatch, capsys):
    src, ref, saved = tmp_path / "src", tmp_path / "ref", tmp_path / "hyp"
    src.write_text("a b\nc d\n")
    ref.write_text("a b\nc d\n")
    decoding_fails(monkeypatch, "decoded before checking")
    assert main(["evaluate", "--model", str(model_dir), "--src", str(src), "--ref", str(ref), "--metric", "rouge",
                 "--tokenize", "intl", "--save-hyp", str(saved)]) == 2
    assert "--tokenize is sacreBLEU's" in capsys.readouterr().err and not saved.exists()


@pytest.mark.parametrize("metric", ["bleu", "rouge", "squad"])
def test_evaluate_rejects_empty_files_for_every_metric(tmp_path, capsys, metric):
    """Nothing to score is an error naming the file, not a traceback (BLEU) or a score of 0 (the others)."""
    empty = tmp_path / "empty"
    empty.write_text("")
    assert main(["evaluate", "--hyp", str(empty), "--ref", str(empty), "--metric", metric]) == 2
    assert capsys.readouterr().err == f"aiayn evaluate: error: {empty}: no lines to score\n"


def test_evaluate_several_references_and_each_metric(tmp_path, capsys):
    """Every metric against the libraries called directly: sacreBLEU with two reference streams,
    rouge-score's best reference per line, and SQuAD EM/F1 worked by hand."""
    import sacrebleu
    from rouge_score import rouge_scorer

    hyp, ref1, ref2 = tmp_path / "hyp", tmp_path / "ref1", tmp_path / "ref2"
    hyps, first, second = ["the cat sat on a red mat", "Dogs bark!"], ["the cat sat on the mat", "a dog barked"], \
        ["a cat was sitting on the mat", "dogs bark"]
    for path, lines in ((hyp, hyps), (ref1, first), (ref2, second)):
        path.write_text("".join(line + "\n" for line in lines))
    refs = ["--ref", str(ref1), "--ref", str(ref2)]

    def scored(*flags):
        assert main(["evaluate", "--hyp", str(hyp), *refs, "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    bleu = scored()
    assert bleu["metric"] == "bleu" and bleu["n_references"] == 2 and "nrefs:2" in bleu["bleu_signature"]
    assert bleu["bleu"] == round(sacrebleu.corpus_bleu(hyps, [first, second]).score, 2)
    scorer = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    best = [max(scorer.score(r, h)["rouge2"].fmeasure for r in rs) for h, rs in zip(hyps, zip(first, second))]
    assert scored("--metric", "rouge")["rouge2"] == round(100 * sum(best) / 2, 2)
    # normalised: line 1 "cat sat on red mat" against "cat sat on mat" (P 4/5, R 4/4: F1 8/9) and "cat was sitting
    # on mat" (P = R = 3/5); line 2 "dogs bark" equals the second reference
    squad = scored("--metric", "squad")
    assert squad["exact_match"] == 50.0 and squad["f1"] == round(100 * (8 / 9 + 1) / 2, 2)
    assert main(["evaluate", "--hyp", str(hyp), *refs, "--metric", "rouge", "--tokenize", "intl"]) == 2
    assert "--tokenize" in capsys.readouterr().err
    ref2.write_text("only one line\n")
    assert main(["evaluate", "--hyp", str(hyp), *refs]) == 2
    assert f"{ref2} has 1 lines but {ref1} has 2" in capsys.readouterr().err


def test_evaluate_reads_gzipped_files_and_names_a_broken_one(tmp_path, capsys):
    import gzip

    hyp, ref, packed = tmp_path / "hyp", tmp_path / "ref", tmp_path / "ref.gz"
    hyp.write_text("the cat sat\r\non the mat\n")
    ref.write_text("the cat sat\r\non a mat\n")
    packed.write_bytes(gzip.compress(ref.read_bytes()))
    scores = []
    for path in (ref, packed):
        assert main(["evaluate", "--hyp", str(hyp), "--ref", str(path), "--json"]) == 0
        scores.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["chrf"])
    assert scores[0] == scores[1] > 0  # the same lines, not the compressed bytes read as text
    packed.write_bytes(b"not gzip at all")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(packed)]) == 2
    assert f"{packed}: cannot decompress" in capsys.readouterr().err


def test_evaluate_a_hypothesis_file_refuses_decoding_flags(tmp_path, capsys):
    """They would be ignored: --hyp scores the file as it is."""
    ref = tmp_path / "ref"
    ref.write_text("a b c\n")
    assert main(["evaluate", "--hyp", str(ref), "--ref", str(ref), "--beam-size", "8", "--src", str(ref)]) == 2
    err = capsys.readouterr().err
    assert "--beam-size --src: for --model" in err and "Traceback" not in err
    assert main(["evaluate", "--hyp", str(ref), "--ref", str(ref), "--device", "cpu"]) == 2  # no model runs on it
    assert "--device: for --model" in capsys.readouterr().err


@pytest.mark.parametrize("flags, options", [(["--quantize", "int8"], {"quantize": "int8"}),
                                            (["--precision", "bf16"], {"precision": "bf16"})])
def test_quantize_and_precision_flags_reach_the_translator(model_dir, monkeypatch, capsys, flags, options):
    built = []  # the translators the command builds
    load = Translator.from_pretrained.__func__

    def recorded(cls, *args, **kwargs):
        built.append(load(cls, *args, **kwargs))
        return built[-1]

    monkeypatch.setattr(Translator, "from_pretrained", classmethod(recorded))
    with_stdin(monkeypatch, "\n".join(LINES) + "\n")
    assert main(["translate", str(model_dir), *FAST, *flags]) == 0
    out = capsys.readouterr().out.split("\n")[:-1]
    assert [t.decoder.precision for t in built] == [options.get("quantize") or options["precision"]]
    assert out == load(Translator, model_dir, **options).translate(LINES, beam_size=2, max_len_b=4, min_len=2)


def test_evaluate_a_hypothesis_file_refuses_precision_flags(tmp_path, capsys):
    ref = tmp_path / "ref"
    ref.write_text("a b c\n")
    assert main(["evaluate", "--hyp", str(ref), "--ref", str(ref), "--quantize", "int8"]) == 2
    assert "--quantize: for --model" in capsys.readouterr().err
