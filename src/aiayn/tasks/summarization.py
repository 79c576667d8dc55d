"""Summarization (seed 004 §9.2): a long text is encoded and its summary is decoded.

    data        `SummarizationData`. `data.format = "jsonl"`: `{corpus}/{split}.jsonl[.gz]` records with the fields
                `data.source_field` (default "text") and `data.target_field` ("summary"), plus
                `data.reference_fields` as more references for scoring; or "parallel": a pair
                of line-aligned files `{corpus}/{split}.{src_lang}[.gz]`, `.{tgt_lang}[.gz]`.
                Text is flattened to one line (runs of white space -> one space). Over-long
                inputs are cut to `data.max_input_tokens` tokens, keeping the beginning, and
                counted; none is dropped for its length. Records with an empty field are
                skipped and counted. With `data.carve_fraction` > 0, `data.valid_split` is that
                share of the training records (by a hash of the input text, so twins stay
                together), the rest train: checkpoints and settings are then chosen on
                neither the training text nor the reported split.
    metrics     ROUGE-1/2/L F1 (`rouge-score`, Google's reimplementation of ROUGE-1.5.5, Porter
                stemming), mean over examples. With several references an example scores the
                maximum over them. PEGASUS scores AESLC against the original subject only, so
                the test report gives both: the first reference, and the max over all.
    baseline    the test report adds "lead-n": the first n words of the input for each n in
                LEAD_WORDS, scored the same way, so a reader sees what the model adds.
    inference   `Summarizer`: `aiayn summarize`, POST /v1/summarize
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from aiayn import metrics
from aiayn.data.records import read_jsonl, record_file
from aiayn.metrics import ROUGE_TYPES
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TextPipeline, refuse_one_file_for
from aiayn.tasks.settings import TextPairSettings, carving, check, check_carve

log = logging.getLogger(__name__)

LEAD_WORDS = (4, 8)  # AESLC subjects average 4 words; lead-8 scores higher (../shared/data/aeslc/SOURCE.md)


def flatten(text: str) -> str:
    """One line: runs of white space (newlines included) become one space."""
    return " ".join(text.split())


def lead(text: str, n: int = LEAD_WORDS[0]) -> str:
    """The first `n` words of `text`: the extractive baseline."""
    return " ".join(text.split()[:n])


@dataclass(frozen=True)
class SummarizationData(TextPairSettings):
    format: str = "jsonl"  # "jsonl" (records) | "parallel" (line-aligned {split}.{src_lang} and .{tgt_lang})
    source_field: str = "text"  # jsonl: the input field
    target_field: str = "summary"  # jsonl: the output field (the training target)
    reference_fields: tuple[str, ...] = ()  # more references for scoring (the score is the max over them)
    carve_fraction: float = 0.0  # > 0: valid_split is this share of the training records (by a hash of the input)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_carve(self)
        object.__setattr__(self, "reference_fields", tuple(self.reference_fields))
        check(self.format in ("jsonl", "parallel"), f"data.format must be 'jsonl' or 'parallel', got {self.format!r}")


class Summarizer(TextPipeline):
    """`Summarizer.from_pretrained(DIR).summarize(texts)` (or `load_pipeline(DIR)(texts)`): one summary
    per text, in order, batched by length and decoded with the model directory's defaults
    (overridable per call)."""

    task, command, metric = "summarization", "summarize", "rouge"
    routes = "aiayn.serve.routes.summarize:ROUTES"

    def source(self, given: str) -> str:
        return flatten(given)

    def summarize(self, texts: Sequence[str], **options) -> list[str]:
        """`options`: `Translator.translate` keywords (method, beam_size, progress, ...)."""
        return self(texts, **options)

class SummarizationTask(Seq2SeqTask):
    name = "summarization"
    metrics = ROUGE_TYPES
    data_config = SummarizationData
    pipeline = Summarizer

    def examples(self, split: str) -> Examples:
        """The split's examples; with a carve, the training and validation splits divide the training file."""
        data = self.data
        if not carving(data, split):
            return self._read(split)
        return self._read(data.train_split).carve(split == data.valid_split, data.carve_fraction)

    def check_test_split(self) -> None:
        """As every task's, and a parallel corpus of one TSV file gives no validation pairs but by a carve,
        and no test pairs (it would be read again: the test would score the training pairs)."""
        data = self.data
        if data.format == "parallel":
            refuse_one_file_for(data, [name for name in ("valid_split", "test_split")
                                       if getattr(data, name) and not carving(data, getattr(data, name))])
        super().check_test_split()

    def _read(self, split: str) -> Examples:
        data = self.data
        if data.format == "parallel":
            return self.read_pairs(split, clean=flatten)

        path = record_file(data.corpus, split)
        fields = (data.target_field, *data.reference_fields)  # the training split may lack the extra references
        records = read_jsonl(path, (data.source_field, data.target_field), optional=data.reference_fields,
                             lists=(data.target_field,))  # a list of summaries: the first is trained on
        self.drops.note(split, "empty", records.n_empty, records.n_read, f"{path}: records with an empty field")
        refs = [[flatten(r) for f in fields if f in row for r in _as_list(row[f])] for row in records.rows]
        return Examples([flatten(row[data.source_field]) for row in records.rows], refs)

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        """ROUGE-1/2/L F1 against every reference (max over them)."""
        return {kind: score.score for kind, score in metrics.rouge(hyps, examples.refs).items()}

    def report(self, hyps: list[str], examples: Examples) -> dict:
        """ROUGE of the model and of the lead baseline, against the first reference and the max over all."""
        systems = [("model", hyps)] + [(f"lead{n}", [lead(s, n) for s in examples.src]) for n in LEAD_WORDS]
        out = {}
        for name, refs in (("first_reference", [r[:1] for r in examples.refs]), ("all_references", examples.refs)):
            for system, outputs in systems:
                scores = metrics.rouge(outputs, refs)
                out[f"{system}_{name}"] = {kind: round(s.score, 2) for kind, s in scores.items()}
                out["signature"] = scores["rouge1"].signature
        out["references_per_example"] = max(len(r) for r in examples.refs) if examples.refs else 0
        out["lead_words"] = list(LEAD_WORDS)
        return out


def _as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
