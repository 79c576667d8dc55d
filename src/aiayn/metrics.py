"""Every metric aiayn reports, with the signature that makes it reproducible.

The CLI (`aiayn evaluate`), the trainer's validation and the test evaluation all call
this module, so a figure means the same wherever it is printed.

    bleu(hyps, refs)          sacreBLEU corpus BLEU on detokenized text (13a tokenization by
                              default), the form comparable across papers
    chrf(hyps, refs)          sacreBLEU chrF2
    rouge(hyps, refs)         ROUGE-1, ROUGE-2, ROUGE-L F1 (Google's `rouge-score`, the
                              reimplementation of ROUGE-1.5.5, Porter stemming), averaged
                              over examples; the maximum over an example's references
    exact_match(hyps, refs)   SQuAD v1.1: normalised strings equal (lower case, no punctuation,
    token_f1(hyps, refs)      no articles a/an/the, single spaces); token-overlap F1; the
                              maximum over an example's references; reported in %
    babi_errors(hyps, refs, tasks)  per-task error rate (%) and the count of failed tasks
                              (error above 5%), as the bAbI literature reports them

Each example's reference may be a string or a list of references. ROUGE, exact match and F1
take the maximum over an example's references; BLEU and chrF use them as sacreBLEU's reference
streams, so every example needs the same number. Each returns a `Score`: the value, its signature
(sacreBLEU's, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x`, or ours, which
says what was computed) and a detail line.
"""

from __future__ import annotations

from types import MappingProxyType

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Collection, Sequence, Union

References = Sequence[Union[str, Sequence[str]]]  # one reference, or several, per hypothesis

LOSS_METRICS = ("nll", "loss", "ppl")  # what every validation reports, whatever the task; lower is better


def higher_is_better(name: str, lower_is_better: Collection[str] = ()) -> bool:
    """Whether a larger value of the metric `name` (as validation reports it) is better: not for the
    losses, nor for the metrics a task lists in its `lower_is_better` (bAbI's error rate)."""
    return name not in LOSS_METRICS and name not in lower_is_better


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str
    detail: str

    def to_dict(self, prefix: str | None = None) -> dict:
        key = prefix or self.name
        return {key: round(self.score, 2), f"{key}_signature": self.signature, f"{key}_detail": self.detail}


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")


def bleu(hyps: Sequence[str], refs: References, tokenize: str | None = None) -> Score:
    """Corpus BLEU of detokenized `hyps` against their reference(s) (sacreBLEU)."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize=tokenize) if tokenize else BLEU()
    result = metric.corpus_score(list(hyps), _streams(hyps, refs))
    return Score("bleu", result.score, str(metric.get_signature()), str(result))


def chrf(hyps: Sequence[str], refs: References) -> Score:
    """Corpus chrF2 of `hyps` against their reference(s) (sacreBLEU)."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    result = metric.corpus_score(list(hyps), _streams(hyps, refs))
    return Score("chrf", result.score, str(metric.get_signature()), str(result))


def _ref_lists(refs: References) -> list[list[str]]:
    return [[r] if isinstance(r, str) else list(r) for r in refs]


def _streams(hyps: Sequence[str], refs: References) -> list[list[str]]:
    """sacreBLEU's reference streams (stream j holds every example's j-th reference); an example with fewer
    references than the most has "" in the rest, which sacreBLEU reads as no reference."""
    _check(hyps, refs)
    lists = _ref_lists(refs)
    if not lists:
        raise ValueError("BLEU and chrF need at least one hypothesis to score")
    none = next((i for i, r in enumerate(lists) if not r), None)
    if none is not None:
        raise ValueError(f"every example needs at least one reference; example {none} has none")
    width = max(map(len, lists))
    return [[r[j] if j < len(r) else "" for r in lists] for j in range(width)]


def _mean_of_max(hyps: Sequence[str], refs: References, score) -> float:
    """100 · mean over examples of the best `score(hyp, ref)` over the example's references."""
    _check(hyps, refs)
    lists = _ref_lists(refs)
    if any(not r for r in lists):
        raise ValueError("every example needs at least one reference")
    if not hyps:
        return 0.0
    return 100.0 * sum(max(score(h, r) for r in rs) for h, rs in zip(hyps, lists)) / len(hyps)


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge(hyps: Sequence[str], refs: References) -> dict[str, Score]:
    """ROUGE-1/2/L F1 (x100) with stemming, mean over examples, max over each example's references."""
    import importlib.metadata

    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    version = importlib.metadata.version("rouge-score")
    out = {}
    for kind in ROUGE_TYPES:
        value = _mean_of_max(hyps, refs, lambda h, r: scorer.score(r, h)[kind].fmeasure)
        signature = f"{kind}|F1|stemmer:porter|refs:max|mean over {len(hyps)}|rouge-score:{version}"
        out[kind] = Score(kind, value, signature, f"{kind.upper()} F1 = {value:.2f}")
    return out


def squad_normalize(text: str) -> str:
    """SQuAD v1.1's answer normalisation: lower case, punctuation and the articles a/an/the
    removed, white space collapsed (in the official script's order)."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(hyp: str, ref: str) -> float:
    """SQuAD v1.1 token F1 of normalised strings (0 when nothing is shared, empty strings included)."""
    h, r = squad_normalize(hyp).split(), squad_normalize(ref).split()
    same = sum((Counter(h) & Counter(r)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(h), same / len(r)
    return 2 * precision * recall / (precision + recall)


SQUAD_SIGNATURE = "squad-v1.1 normalisation (lower, punctuation, a/an/the, spaces)|refs:max|mean x100"


def exact_match(hyps: Sequence[str], refs: References) -> Score:
    value = _mean_of_max(hyps, refs, lambda h, r: float(squad_normalize(h) == squad_normalize(r)))
    return Score("exact_match", value, SQUAD_SIGNATURE, f"EM = {value:.2f} on {len(hyps)}")


def token_f1(hyps: Sequence[str], refs: References) -> Score:
    value = _mean_of_max(hyps, refs, _f1)
    return Score("f1", value, SQUAD_SIGNATURE, f"F1 = {value:.2f} on {len(hyps)}")


BABI_FAILED_ABOVE = 5.0  # % error: a bAbI task counts as failed above this (Weston et al., 2015)


@dataclass(frozen=True)
class BabiErrors:
    per_task: dict  # task -> error rate in %, by exact match of normalised answers
    mean: float  # mean of the per-task error rates
    failed: int  # tasks with an error rate above BABI_FAILED_ABOVE

    def to_dict(self) -> dict:
        return {"babi_mean_error": round(self.mean, 2), "babi_failed_tasks": self.failed,
                "babi_task_error": {str(k): round(v, 2) for k, v in sorted(self.per_task.items())}}


def babi_errors(hyps: Sequence[str], refs: Sequence[str], tasks: Sequence[int]) -> BabiErrors:
    """Per-task error rates (%) of `hyps` against one answer each; `tasks` names each example's task."""
    _check(hyps, refs)
    if len(tasks) != len(hyps):
        raise ValueError(f"{len(hyps)} hypotheses but {len(tasks)} task ids")
    wrong: Counter = Counter()
    total: Counter = Counter(tasks)
    for h, r, t in zip(hyps, refs, tasks):
        wrong[t] += squad_normalize(h) != squad_normalize(r)
    per_task = {t: 100.0 * wrong[t] / n for t, n in total.items()}
    mean = sum(per_task.values()) / len(per_task) if per_task else 0.0
    return BabiErrors(per_task, mean, sum(e > BABI_FAILED_ABOVE for e in per_task.values()))


METRICS = MappingProxyType({"bleu": bleu, "chrf": chrf, "rouge": rouge, "exact_match": exact_match,
                            "f1": token_f1})


def translation_scores(hyps: Sequence[str], refs: References, tokenize: str | None = None) -> dict:
    """BLEU and chrF with their signatures, as `aiayn evaluate` prints them."""
    return {**bleu(hyps, refs, tokenize).to_dict(), **chrf(hyps, refs).to_dict(), "n_sentences": len(hyps)}


def summary_scores(hyps: Sequence[str], refs: References) -> dict:
    """ROUGE-1/2/L F1 with their signatures, as `aiayn evaluate --metric rouge` prints them."""
    out = {"n_sentences": len(hyps)}
    for score in rouge(hyps, refs).values():
        out.update(score.to_dict())
    return out


def qa_scores(hyps: Sequence[str], refs: References) -> dict:
    """SQuAD v1.1 exact match and F1 with their signature, as `aiayn evaluate --metric squad` prints them."""
    return {**exact_match(hyps, refs).to_dict(), **token_f1(hyps, refs).to_dict(), "n_sentences": len(hyps)}


def accuracy(hyps: Sequence[str], refs: References) -> Score:
    """Per cent of outputs equal to one of their references (labels, compared as strings)."""
    _check(hyps, refs)
    value = 100.0 * sum(h in r for h, r in zip(hyps, _ref_lists(refs))) / max(len(hyps), 1)  # a str is one label
    return Score("accuracy", value, "accuracy %|exact string|refs:any", f"accuracy = {value:.2f}% on {len(hyps)}")


def accuracy_scores(hyps: Sequence[str], refs: References) -> dict:
    """Accuracy with its signature, as `aiayn evaluate --metric accuracy` prints it."""
    return {**accuracy(hyps, refs).to_dict(), "n_sentences": len(hyps)}


SCORERS = MappingProxyType({"bleu": translation_scores, "rouge": summary_scores, "squad": qa_scores,
                            "accuracy": accuracy_scores})
