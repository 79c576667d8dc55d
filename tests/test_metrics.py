"""aiayn.metrics against sacreBLEU called directly, and the signature it reports."""

import pytest
import sacrebleu

from aiayn import metrics

HYPS = ["the cat sat on the mat", "a dog runs in the park", "hello"]
REFS = ["the cat sat on a mat", "a dog is running in the park", "hello there"]


def test_bleu_is_sacrebleu_corpus_bleu_with_its_signature():
    score = metrics.bleu(HYPS, REFS)
    assert score.score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert "tok:13a" in score.signature and "nrefs:1" in score.signature
    assert score.detail.startswith("BLEU = ")
    assert metrics.bleu(REFS, REFS).score == pytest.approx(100.0)
    assert "tok:char" in metrics.bleu(HYPS, REFS, tokenize="char").signature


def test_chrf_and_the_evaluate_dict():
    assert metrics.chrf(HYPS, REFS).score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    out = metrics.translation_scores(HYPS, REFS)
    assert out["bleu"] == round(metrics.bleu(HYPS, REFS).score, 2) and out["n_sentences"] == 3
    assert out["chrf_signature"].startswith("nrefs:1")


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        metrics.bleu(HYPS[:2], REFS)
