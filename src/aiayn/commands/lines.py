"""The CLI's line formats: how a command that answers with a model (`aiayn translate`, `classify`,
`embed`, `answer`, `evaluate --model`, `plot attention --sentence`) reads an input line and writes an
output line. A pipeline names its format in `Pipeline.lines` ("module:NAME", as `Pipeline.routes`
names its HTTP routes); one that names none reads a line as its text and writes the `text` of its
output. A task defined outside aiayn declares its own format the same way, next to it."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Sequence


def one_line(text: str) -> str:
    """An output never breaks line alignment: line breaks inside it become spaces."""
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


def text_line(pipeline, given, output) -> str:
    return one_line(pipeline.text(output))


@dataclass(frozen=True)
class LineFormat:
    """`parse(line)` -> one input of the pipeline; its ValueError names nothing (the caller adds the
    file and line number). `write(pipeline, input, output)` -> the output line, without its newline."""

    parse: Callable[[str], Any] = str  # the line itself
    write: Callable[[Any, Any, Any], str] = text_line


def label_line(pipeline, given, output: tuple[str, float]) -> str:
    label, probability = output
    return f"{label}\t{probability:.4f}"


def vector_line(pipeline, given, output) -> str:
    """The JSON array of an embedding (an ndarray: one vector, or one per token), 6 decimals."""
    return json.dumps(output.round(6).tolist())


def json_object(line: str, fields: Sequence[str]) -> dict:
    """A JSON object with non-empty string `fields`."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON object ({e})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    for name in fields:
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise ValueError(f"field {name!r} must be a non-empty string")
    return record


def context_question(line: str) -> tuple[str, str]:
    record = json_object(line, ("context", "question"))
    return record["context"], record["question"]


def answer_line(pipeline, given: tuple[str, str], output) -> str:
    """The question's JSON object with its "prediction"."""
    context, question = given
    return json.dumps({"context": context, "question": question, "prediction": pipeline.text(output)},
                      ensure_ascii=False)


def pixel_rows(line: str) -> Any:
    """An image as a JSON array of pixel rows; the pipeline checks its shape and values."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON array of pixel rows ({e})") from None


TEXTS = LineFormat()
LABELS = LineFormat(write=label_line)  # a text in; "label<TAB>probability" out
VECTORS = LineFormat(write=vector_line)  # a text in; its embedding as a JSON array out
QUESTIONS = LineFormat(parse=context_question, write=answer_line)  # {"context", "question"} in; + "prediction" out
IMAGES = LineFormat(parse=pixel_rows, write=label_line)  # pixel rows in; "label<TAB>probability" out


def line_format(pipeline) -> LineFormat:
    """The format `pipeline.lines` names ("module:NAME"); TEXTS where it names none."""
    return pkgutil.resolve_name(pipeline.lines) if pipeline.lines else TEXTS
