"""An input's edge white space is no part of it (`aiayn.decoding.common.input_tokens`): every training
reader strips its lines and fields, and our sentencepiece vocabularies keep white space exactly, so
without the strip a file line's trailing space would be a piece no training text ended with, and
`aiayn classify -i dev.txt` would answer otherwise than the evaluation of the same sentences."""

import pytest

from aiayn.cli import main
from aiayn.data.tokenizer import SentencePieceTokenizer
from aiayn.decoding.common import input_tokens
from aiayn.tasks import load_pipeline
from tiny_models import tiny_model

SENTENCES = [f"the {a} {verb} on the {b} ." for a in ("cat", "dog", "bird", "fox") for b in ("mat", "log", "hill")
             for verb in ("sat", "ran", "slept")]
PADDED = ["the cat sat on the mat . ", "\t the dog ran  ", "a fox slept on the hill .\u3000"]


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer.train(texts=SENTENCES, vocab_size=40, byte_fallback=False)


def stripped(texts):
    return [t.strip() for t in texts]


def test_a_trailing_space_is_a_piece_of_its_own_so_inputs_are_stripped(tokenizer):
    assert tokenizer.encode("the cat ") != tokenizer.encode("the cat")  # what the strip is for
    assert [input_tokens(tokenizer, t) for t in PADDED] == [tokenizer.encode(t) for t in stripped(PADDED)]


def test_classification_answers_a_padded_text_as_the_stripped_one(tmp_path, tokenizer, capsys):
    directory = tiny_model(tmp_path / "m", "classify", tokenizer=tokenizer)
    pipeline = load_pipeline(directory)
    expected = pipeline(stripped(PADDED))
    assert pipeline(PADDED) == expected
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in PADDED))
    assert main(["classify", "--model", str(directory), "-i", str(tmp_path / "in.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{label}\t{p:.4f}" for label, p in expected]
    assert pipeline.attention(PADDED[0]).src_ids == pipeline.attention(PADDED[0].strip()).src_ids  # `aiayn plot`


def test_translation_scores_a_padded_source_as_the_stripped_one(tmp_path, tokenizer, capsys):
    directory = tiny_model(tmp_path / "m", "translation", tokenizer=tokenizer)
    pipeline = load_pipeline(directory)
    expected = pipeline(stripped(PADDED), nbest=2, method="beam")  # (text, score) lists: the scores see every source token
    assert pipeline(PADDED, nbest=2, method="beam") == expected
    assert "".join(pipeline.stream(PADDED[1])) == pipeline([PADDED[1].strip()])[0]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in PADDED))
    assert main(["translate", str(directory), "-i", str(tmp_path / "in.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == pipeline(stripped(PADDED))


def test_a_target_tag_stands_one_space_before_the_text(tmp_path, tokenizer):
    directory = tiny_model(tmp_path / "m", "translation", tokenizer=tokenizer, target_tag="<2{}>")
    assert load_pipeline(directory).targeted(PADDED, "en") == [f"<2en> {t}" for t in stripped(PADDED)]
