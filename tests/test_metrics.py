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


def test_bleu_streams_take_any_number_of_references_but_not_none():
    """Several references per example are sacreBLEU's reference streams; an example with fewer fills the rest
    with "", which sacreBLEU reads as missing (a blank line of a second --ref file is no reference)."""
    two = [[r, h] for r, h in zip(REFS, HYPS)]
    assert metrics.bleu(HYPS, two).score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS, HYPS]).score)
    fewer = two[:2] + [[REFS[2]]]
    assert metrics.chrf(HYPS, fewer).score == pytest.approx(
        sacrebleu.corpus_chrf(HYPS, [REFS, HYPS[:2] + [""]]).score)
    with pytest.raises(ValueError, match="example 0 has none"):
        metrics.bleu(HYPS[:1], [[]])
    with pytest.raises(ValueError, match="example 2 has none"):
        metrics.bleu(HYPS, two[:2] + [[]])
    with pytest.raises(ValueError, match="at least one hypothesis"):
        metrics.bleu([], [])  # sacreBLEU itself fails with an IndexError


def test_squad_normalisation_hand_worked():
    assert metrics.squad_normalize("The  Cat, sat!") == "cat sat"
    assert metrics.squad_normalize("An apple a day") == "apple day"
    assert metrics.squad_normalize("theatre") == "theatre"  # articles only as whole words


def test_exact_match_and_f1_hand_worked():
    assert metrics.exact_match(["the cat", "a cat sat"], ["Cat", "cat"]).score == pytest.approx(50.0)
    # "cat sat on mat" vs "the cat sat": 2 shared of 4 and 2 -> P 1/2, R 1, F1 2/3
    assert metrics.token_f1(["cat sat on mat"], ["the cat sat"]).score == pytest.approx(200 / 3)
    assert metrics.token_f1(["kitchen"], [["hallway", "the kitchen"]]).score == pytest.approx(100.0)  # best ref
    assert metrics.token_f1(["a"], ["the"]).score == 0.0  # both empty after normalisation: SQuAD v1.1 gives 0
    assert "squad-v1.1" in metrics.exact_match(["x"], ["x"]).signature


def test_rouge_is_rouge_score_with_stemming_and_the_best_reference():
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    refs = [["a cat is running in the park", "the cat sat on a mat"], "a dog runs"]
    got = metrics.rouge(HYPS[:2], refs)
    for kind in ("rouge1", "rouge2", "rougeL"):
        best0 = max(scorer.score(r, HYPS[0])[kind].fmeasure for r in refs[0])
        expected = 100 * (best0 + scorer.score(refs[1], HYPS[1])[kind].fmeasure) / 2
        assert got[kind].score == pytest.approx(expected)
        assert "stemmer:porter" in got[kind].signature and "refs:max" in got[kind].signature
    assert metrics.rouge(["cats running"], ["cat runs"])["rouge1"].score == pytest.approx(100.0)  # stemmed


def test_babi_error_rates_and_failed_tasks():
    errors = metrics.babi_errors(["kitchen", "garden", "office", "yes", "no"],
                                 ["kitchen", "hallway", "Office.", "yes", "no"], [1, 1, 1, 2, 2])
    assert errors.per_task == {1: pytest.approx(100 / 3), 2: 0.0}
    assert errors.failed == 1 and errors.mean == pytest.approx(100 / 6)
    at_threshold = metrics.babi_errors(["no"] + ["yes"] * 19, ["yes"] * 20, [3] * 20)  # 1 wrong of 20: 5.0%
    assert at_threshold.per_task == {3: 5.0} and at_threshold.failed == 0  # failed means above 5%


def test_accuracy_compares_whole_labels_even_given_one_string_per_example():
    """A string reference is one label, not a set of substrings: "pos" is not "positive", "" matches nothing."""
    assert metrics.accuracy(["pos", "", "neg"], ["positive", "neg", "neg"]).score == pytest.approx(100 / 3)
    assert metrics.accuracy(["pos"], [["neg", "pos"]]).score == 100.0
