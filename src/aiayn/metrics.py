"""Every metric aiayn reports, with the signature that makes it reproducible.

The CLI (`aiayn evaluate`), the trainer's validation and the test evaluation all call
this module, so a figure means the same wherever it is printed.

    bleu(hyps, refs)   sacreBLEU corpus BLEU on detokenized text (13a tokenization by
                       default), the form comparable across papers
    chrf(hyps, refs)   sacreBLEU chrF2

`refs` is one reference per hypothesis. Each returns a `Score`: the value, its signature
(sacreBLEU's, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x`) and the
detailed line sacreBLEU prints.
"""

from __future__ import annotations

from types import MappingProxyType

from dataclasses import dataclass
from typing import Sequence


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


def bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str | None = None) -> Score:
    """Corpus BLEU of detokenized `hyps` against one reference each (sacreBLEU)."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    metric = BLEU(tokenize=tokenize) if tokenize else BLEU()
    result = metric.corpus_score(list(hyps), [list(refs)])
    return Score("bleu", result.score, str(metric.get_signature()), str(result))


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> Score:
    """Corpus chrF2 of `hyps` against one reference each (sacreBLEU)."""
    from sacrebleu.metrics import CHRF

    _check(hyps, refs)
    metric = CHRF()
    result = metric.corpus_score(list(hyps), [list(refs)])
    return Score("chrf", result.score, str(metric.get_signature()), str(result))


METRICS = MappingProxyType({"bleu": bleu, "chrf": chrf})


def translation_scores(hyps: Sequence[str], refs: Sequence[str], tokenize: str | None = None) -> dict:
    """BLEU and chrF with their signatures, as `aiayn evaluate` prints them."""
    out = {**bleu(hyps, refs, tokenize).to_dict(), **chrf(hyps, refs).to_dict(), "n_sentences": len(hyps)}
    return out
