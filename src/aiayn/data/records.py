"""Records beyond parallel text: JSON lines and the bAbI story format.

Both read through `corpus.read_lines` (UTF-8, `.gz`, lines split at "\\n" only), and every
problem is a `CorpusError` naming the file and line. Nothing is returned until a whole file
has been read.

JSON lines: one object per line with the fields asked for (string values); an example with
an empty field is skipped and counted, as the parallel reader does, or is an error with
`strict=True`. A field may hold a list of strings (several references); its blank strings are
dropped, and a list left empty is an empty field.

bAbI (Weston et al., 2015): numbered lines; a line numbered 1 starts a new story. A question
line is `ID question<TAB>answer<TAB>supporting fact IDs`; every other line is a fact. The
context of a question is the story's facts so far (questions are not part of it). Answers
may hold several words separated by commas (`north,west`, `football,apple`): they are kept
as they are.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Union

from aiayn.data.corpus import CorpusError, read_lines

Field = Union[str, list[str]]


@dataclass(frozen=True)
class Records:
    rows: list[dict[str, Field]]
    n_read: int  # non-blank lines read
    n_empty: int  # skipped for an empty field


def read_jsonl(path: str | Path, fields: Sequence[str], strict: bool = False, optional: Sequence[str] = (),
               lists: Sequence[str] = ()) -> Records:
    """The `fields` of every JSON object in `path` (one per line; blank lines are ignored), and
    those of the `optional` fields it has (an empty optional field counts as absent). Each is a string;
    those of `lists` and the optional ones (references, answers) may be lists of strings."""
    rows, n_read, n_empty = [], 0, 0
    for i, line in enumerate(read_lines(path), start=1):
        if not line:
            continue
        n_read += 1
        row = _json_object(path, i, line)
        missing = [f for f in fields if f not in row]
        if missing:
            raise CorpusError(f"{path}:{i}: missing field(s) {', '.join(missing)}; has {', '.join(sorted(row))}")
        values = {f: _text(path, i, f, row[f], f in lists) for f in fields}
        extra = {f: v for f in optional if f in row and _filled(v := _text(path, i, f, row[f], True))}
        if not all(map(_filled, values.values())):
            if strict:
                raise CorpusError(f"{path}:{i}: empty field")
            n_empty += 1
            continue
        rows.append({**values, **extra})
    return Records(rows, n_read, n_empty)


def _json_object(path, i: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{i}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(row, dict):
        raise CorpusError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
    return row


def _text(path, i: int, field: str, value, may_be_list: bool) -> Field:
    """A string, or where `may_be_list` a list of strings without its blank ones (a blank reference is no
    reference)."""
    if isinstance(value, str):
        return value
    if may_be_list and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    kind = "a string or a list of strings" if may_be_list else "a string"
    raise CorpusError(f"{path}:{i}: field {field!r} must be {kind}, got {value!r:.60}")


def _filled(value: Field) -> bool:
    return bool(value.strip() if isinstance(value, str) else value)


@dataclass(frozen=True)
class BabiExample:
    context: list[str]  # the story's facts before the question, in order
    question: str
    answer: str  # as written: "bathroom", "north,west"
    supporting: tuple[int, ...]  # line numbers (IDs) of the supporting facts
    task: int  # from the file name (qaN_...), 0 when it has none
    story: int = 0  # the story's number in its file, from 0


_LINE = re.compile(r"^(\d+) (.*)$")
_TASK = re.compile(r"qa(\d+)_")


def read_babi(path: str | Path) -> list[BabiExample]:
    """Every question of a bAbI file with its story so far."""
    path = Path(path)
    task = int(m.group(1)) if (m := _TASK.match(path.name)) else 0
    examples, facts, story = [], {}, -1  # facts: ID -> sentence, of the current story
    for i, line in enumerate(read_lines(path), start=1):
        m = _LINE.match(line)
        if m is None:
            raise CorpusError(f"{path}:{i}: expected 'ID text', got {line[:60]!r}")
        number, text = int(m.group(1)), m.group(2)
        if number == 1:
            facts, story = {}, story + 1
        if "\t" not in text:
            facts[number] = text.strip()
            continue
        parts = text.split("\t")
        if len(parts) < 2 or not parts[1].strip():
            raise CorpusError(f"{path}:{i}: question line without an answer (expected question<TAB>answer<TAB>ids)")
        support = parts[2].split() if len(parts) > 2 else []
        if not all(s.isdigit() for s in support):
            raise CorpusError(f"{path}:{i}: supporting facts must be line numbers, got {parts[2]!r}")
        examples.append(BabiExample(list(facts.values()), parts[0].strip(), parts[1].strip(),
                                    tuple(int(s) for s in support), task, story))
    return examples


def record_file(directory: str | Path, split: str, suffixes: Sequence[str] = (".jsonl", ".jsonl.gz")) -> Path:
    """`{directory}/{split}{suffix}` for the first suffix that exists; the error names what was looked for."""
    candidates = [Path(directory) / f"{split}{suffix}" for suffix in suffixes]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise CorpusError(f"{candidates[0]}: file not found (split {split!r}; also tried "
                          f"{', '.join(p.name for p in candidates[1:])})")
    return found
