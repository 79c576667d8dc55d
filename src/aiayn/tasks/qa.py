"""Question answering (seed 004 §9.3): `context [SEP] question` is encoded, the answer decoded.

    data        `QAData`. `data.format = "babi"`: bAbI story files (`aiayn.data.records.read_babi`;
                the context of a question is its story so far). A split names its files:
                white-space separated glob patterns under `data.corpus`. With
                `data.carve_fraction` > 0, `data.valid_split` is carved from the training files by
                story (a hash of file name and story number, so it never changes between runs),
                the training split is the rest, and any other split (the test files) is read whole.
                `data.format = "jsonl"`: `{corpus}/{split}.jsonl[.gz]` with "context", "question"
                and "answer" (a string, or a list of accepted answers); a carve holds out records
                by a hash of the source (context and question), as the summarization task does.
    source      `{context} [SEP] {question}`; "[SEP]" is a piece of its own in the vocabulary.
                Over `data.max_input_tokens` tokens, the *start* of the context is cut: the
                question and the latest facts stay, in training and through every door.
    metrics     exact match and token F1 with SQuAD v1.1's normalisation; for bAbI also the
                per-task error rate, its mean and the failed tasks (error > 5%).
    inference   `QA`: `aiayn answer`, POST /v1/answer
"""

from __future__ import annotations

import glob
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Mapping, Optional, Sequence

from aiayn import metrics
from aiayn.config import UNK_ID, ConfigError
from aiayn.data.corpus import CorpusError
from aiayn.data.records import read_babi, read_jsonl, record_file
from aiayn.tasks.pipeline import RequestError
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TextPipeline
from aiayn.tasks.settings import TextPairSettings, carved, carving, check, check_carve

log = logging.getLogger(__name__)

SEP = "[SEP]"


_END_PUNCTUATION = re.compile(r"(?<=\w)([.?!,;:])(?=\s|$)")


def words(text: str) -> str:
    """White space collapsed and sentence punctuation split from the word before it ("Mary?" ->
    "Mary ?"), so that with a whitespace vocabulary the question's "Mary" is the context's "Mary"
    and an answer "garden" is a token of "... to the garden ." (as PTB tokenization does)."""
    return " ".join(_END_PUNCTUATION.sub(r" \1", text).split())


def qa_source(context: str, question: str) -> str:
    """The encoder's input, as in seed 004 §9.3: `{context} [SEP] {question}`, in `words`."""
    return f"{words(context)} {SEP} {words(question)}"


def sentence_end_ids(tokenizer) -> tuple[int, ...]:
    """The ids of ".", "?" and "!" where the vocabulary holds each as one token of its own."""
    ids = {tuple(tokenizer.encode(mark)) for mark in ".?!"}
    ends = tuple(sorted(x[0] for x in ids if len(x) == 1 and x[0] != UNK_ID))
    if not ends:
        raise ConfigError("source_units = 'sentences': the vocabulary has no '.', '?' or '!' token to end a sentence")
    return ends


@dataclass(frozen=True)
class QAData(TextPairSettings):
    renamed: ClassVar[Mapping[str, Optional[str]]] = MappingProxyType(
        {**TextPairSettings.renamed, "valid_fraction": "carve_fraction"})
    format: str = "babi"  # "babi" (bAbI story files) | "jsonl" (context, question, answer records)
    carve_fraction: float = 0.0  # > 0: valid_split is this share of the training files' stories or records (by hash)
    carve_offset: float = 0.0  # where in the hash's range the carve starts: 0.1 with 0.1 is disjoint from 0 with 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.format in ("babi", "jsonl"), f"data.format must be 'babi' or 'jsonl', got {self.format!r}")
        check_carve(self)
        check(0.0 <= self.carve_offset and self.carve_offset + self.carve_fraction <= 1.0,
              f"data.carve_offset + data.carve_fraction must be within [0, 1], got {self.carve_offset} + "
              f"{self.carve_fraction}")


class QA(TextPipeline):
    """`QA.from_pretrained(DIR).answer(context, question)` (or `load_pipeline(DIR)([(context,
    question)])`); with two lists, one answer per pair, batched together."""

    task, command, metric = "qa", "answer", "squad"
    routes = "aiayn.serve.routes.answer:ROUTES"
    lines = "aiayn.commands.lines:QUESTIONS"

    def source(self, given) -> str:
        context, question = given
        if not context.strip() or not question.strip():
            raise RequestError("the context and the question must not be empty")
        return qa_source(context, question)

    def answer(self, context: str | Sequence[str], question: str | Sequence[str], **options) -> str | list[str]:
        """`options`: `Translator.translate` keywords (method, beam_size, progress, ...)."""
        if isinstance(context, str) != isinstance(question, str):
            raise TypeError("answer takes a context and a question, or a list of each")
        if isinstance(context, str):
            return self([(context, question)], **options)[0]
        if len(context) != len(question):
            raise ValueError(f"{len(context)} contexts but {len(question)} questions")
        return self(list(zip(context, question)), **options)

class QATask(Seq2SeqTask):
    name = "qa"
    metrics = ("exact_match", "f1", "babi_mean_error", "babi_failed_tasks")  # the last two for bAbI
    lower_is_better = ("babi_mean_error", "babi_failed_tasks")
    data_config = QAData
    pipeline = QA
    keep = "end"
    user_symbols = (SEP,)

    def __init__(self, cfg):
        super().__init__(cfg)
        self._parsed: dict[Path, list] = {}  # bAbI file -> its questions

    def model_spec(self):
        """The encoder-decoder; with `model.source_units = "sentences"`, the ids that end a sentence
        ("." "?" "!", as `words` splits them off) filled in from the vocabulary unless the recipe gives them."""
        import dataclasses

        kind, config = super().model_spec()
        if getattr(config, "source_units", "tokens") == "sentences" and not config.sentence_ends:
            config = dataclasses.replace(config, sentence_ends=sentence_end_ids(self.tokenizers.src))
        return kind, config

    def examples(self, split: str) -> Examples:
        data = self.data
        if data.format == "babi":
            return self._babi(split)
        if not carving(data, split):
            return self._jsonl(split)
        return self._jsonl(data.train_split).carve(split == data.valid_split, data.carve_fraction, data.carve_offset)

    def _jsonl(self, split: str) -> Examples:
        data = self.data
        path = record_file(data.corpus, split)
        records = read_jsonl(path, ("context", "question", "answer"), lists=("answer",))
        self.drops.note(split, "empty", records.n_empty, records.n_read, f"{path}: records with an empty field")
        return Examples([qa_source(r["context"], r["question"]) for r in records.rows],
                        [[r["answer"]] if isinstance(r["answer"], str) else list(r["answer"]) for r in records.rows])

    def _babi(self, split: str) -> Examples:
        """Questions of the bAbI files behind `split`. With a carve, the training split and the carved
        validation split divide the training files' stories, and a training question that the carved split
        also asks (bAbI's generator repeats stories under other numbers: 6% of the carve, 75% of task 4's)
        is left out of training, counted; any other split is read whole."""
        data = self.data
        carve = carving(data, split)
        questions = [(path, ex, _babi_source(ex)) for path in babi_files(data.corpus, data.train_split if carve else split)
                     for ex in self._read_babi(path)]  # (file, question, source)
        if carve:
            held = [carved(f"{path.name}:{ex.story}", data.carve_fraction, data.carve_offset) for path, ex, _ in questions]
            asked = {src for (_, _, src), h in zip(questions, held) if h}
            questions = [q for q, h in zip(questions, held) if h == (split == data.valid_split)]
            if split != data.valid_split:
                n = len(questions)
                questions = [q for q in questions if q[2] not in asked]
                self.drops.note(split, "duplicate", n - len(questions), n, "questions the carved split asks too")
        return Examples([src for _, _, src in questions], [[ex.answer] for _, ex, _ in questions],
                        [ex.task for _, ex, _ in questions])

    def _read_babi(self, path: Path) -> list:
        if path not in self._parsed:  # each split reads the same files: parse them once
            self._parsed[path] = read_babi(path)
        return self._parsed[path]

    def valid_subset(self, examples: Examples, n: int) -> Examples:
        """n questions spread over the split (the first n would all come from task 1)."""
        return examples.spread(n)

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        """Exact match and F1 (x100); for bAbI also the mean per-task error and the failed tasks."""
        out = {"exact_match": metrics.exact_match(hyps, examples.refs).score,
               "f1": metrics.token_f1(hyps, examples.refs).score}
        if examples.groups and all(examples.groups):
            errors = metrics.babi_errors(hyps, examples.tgt, examples.groups)
            out.update(babi_mean_error=errors.mean, babi_failed_tasks=float(errors.failed))
        return out

    def report(self, hyps: list[str], examples: Examples) -> dict:
        out = {k: round(v, 2) for k, v in self.scores(hyps, examples).items()}
        if "babi_mean_error" in out:
            out.update(metrics.babi_errors(hyps, examples.tgt, examples.groups).to_dict())
        out["signature"] = metrics.SQUAD_SIGNATURE
        return out


def _babi_source(ex) -> str:
    """A bAbI question as the model reads it: its story, [SEP], the question."""
    return qa_source(" ".join(ex.context), ex.question)


def babi_files(directory: str | Path, patterns: str) -> list[Path]:
    """The files matching the white-space separated glob `patterns` under `directory`, in
    task order (qa1, qa2, ..., by the number in the name), each pattern matching at least one."""
    files: list[Path] = []
    for pattern in patterns.split():
        found = sorted(Path(p) for p in glob.glob(str(Path(directory) / pattern)))
        if not found:
            raise CorpusError(f"{Path(directory) / pattern}: no bAbI file matches")
        files.extend(found)
    return sorted(set(files), key=lambda p: (_task_number(p), str(p)))


def _task_number(path: Path) -> int:
    digits = "".join(ch for ch in path.name.split("_")[0] if ch.isdigit())
    return int(digits) if digits else 0
