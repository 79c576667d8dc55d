"""Question answering (seed 004 §9.3): `context [SEP] question` is encoded, the answer decoded.

    data        `data.format = "babi"`: bAbI story files (`aiayn.data.records.read_babi`; the
                context of a question is its story so far). `data.train_split` names the files:
                white-space separated glob patterns under `data.corpus`. With
                `data.valid_fraction` > 0, `data.valid_split` is carved from those files by story
                (a hash of file name and story number, so it never changes between runs) and the
                training split is the rest.
                `data.format = "jsonl"`: `{corpus}/{split}.jsonl[.gz]` with "context", "question"
                and "answer" (a string, or a list of accepted answers).
    source      `{context} [SEP] {question}`; "[SEP]" is a piece of its own in the vocabulary.
                Over `data.max_source_length` tokens, the *start* of the context is cut: the
                question and the latest facts stay.
    metrics     exact match and token F1 with SQuAD v1.1's normalisation; for bAbI also the
                per-task error rate, its mean and the failed tasks (error > 5%).
    inference   `QA`
"""

from __future__ import annotations

import glob
import hashlib
import re
import logging
from pathlib import Path
from typing import Sequence

from aiayn.data.corpus import CorpusError
from aiayn.data.records import record_file
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TaskPipeline

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


def carved(name: str, story: int, fraction: float) -> bool:
    """Whether story `story` of file `name` belongs to the carved validation split: a hash, not a
    random draw, so the split is the same in every run and on every machine."""
    digest = hashlib.blake2b(f"{name}:{story}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < fraction


class QATask(Seq2SeqTask):
    name = "qa"
    keep = "end"
    user_symbols = (SEP,)

    def __init__(self, cfg):
        super().__init__(cfg)
        self._parsed: dict[Path, list] = {}  # bAbI file -> its questions

    def examples(self, split: str) -> Examples:
        data = self.data
        if data.format == "babi":
            return self._babi(split)
        if data.format != "jsonl":
            raise ValueError(f"task qa reads data.format 'babi' or 'jsonl', not {data.format!r}")
        from aiayn.data.records import read_jsonl

        path = record_file(data.corpus, split)
        records = read_jsonl(path, ("context", "question", "answer"))
        if records.n_empty:
            log.info("%s: %d of %d records skipped for an empty field", path, records.n_empty, records.n_read)
        return Examples([qa_source(r["context"], r["question"]) for r in records.rows],
                        [[r["answer"]] if isinstance(r["answer"], str) else list(r["answer"]) for r in records.rows])

    def _babi(self, split: str) -> Examples:
        """Questions of the bAbI files behind `split`, with the carved validation split applied."""
        from aiayn.data.records import read_babi

        data = self.data
        carve = data.valid_fraction > 0
        pattern = data.train_split if carve and split == data.valid_split else split
        src, refs, groups = [], [], []
        for path in babi_files(data.corpus, pattern):
            if path not in self._parsed:  # each split reads the same files: parse them once
                self._parsed[path] = read_babi(path)
            for ex in self._parsed[path]:
                if carve and carved(path.name, ex.story, data.valid_fraction) != (split == data.valid_split):
                    continue
                src.append(qa_source(" ".join(ex.context), ex.question))
                refs.append([ex.answer])
                groups.append(ex.task)
        return Examples(src, refs, groups)

    def valid_subset(self, examples: Examples, n: int) -> Examples:
        """n questions spread over the split (the first n would all come from task 1)."""
        return examples.spread(n)

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        """Exact match and F1 (x100); for bAbI also the mean per-task error and the failed tasks."""
        from aiayn import metrics

        out = {"exact_match": metrics.exact_match(hyps, examples.refs).score,
               "f1": metrics.token_f1(hyps, examples.refs).score}
        if examples.groups and all(examples.groups):
            errors = metrics.babi_errors(hyps, examples.tgt, examples.groups)
            out.update(babi_mean_error=errors.mean, babi_failed_tasks=float(errors.failed))
        return out

    def report(self, hyps: list[str], examples: Examples) -> dict:
        from aiayn import metrics

        out = {k: round(v, 2) for k, v in self.scores(hyps, examples).items()}
        if "babi_mean_error" in out:
            out.update(metrics.babi_errors(hyps, examples.tgt, examples.groups).to_dict())
        out["signature"] = metrics.SQUAD_SIGNATURE
        return out


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


class QA(TaskPipeline):
    """`QA.from_pretrained(DIR).answer(context, question)`; with two lists, one answer per pair,
    batched together."""

    task = QATask.name

    def answer(self, context: str | Sequence[str], question: str | Sequence[str], **overrides) -> str | list[str]:
        """`overrides`: `Translator.translate` keywords (method, beam_size, progress, ...)."""
        if isinstance(context, str) != isinstance(question, str):
            raise TypeError("answer takes a context and a question, or a list of each")
        if isinstance(context, str):
            return self.translator.translate([qa_source(context, question)], **overrides)[0]
        if len(context) != len(question):
            raise ValueError(f"{len(context)} contexts but {len(question)} questions")
        return self.translator.translate([qa_source(c, q) for c, q in zip(context, question)], **overrides)
