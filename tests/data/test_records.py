import gzip
import json

import pytest

from aiayn.data.corpus import CorpusError
from aiayn.data.records import read_babi, read_jsonl

STORY = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 How do you go from the kitchen to the garden?\tnorth,west\t2 4
1 Sandra journeyed to the office.
2 Where is Sandra?\toffice\t1
"""


def test_babi_stories_restart_and_multi_word_answers(tmp_path):
    path = tmp_path / "qa19_path-finding_train.txt"
    path.write_text(STORY)
    a, b, c = read_babi(path)
    assert (a.context, a.question, a.answer, a.supporting, a.task) == (
        ["Mary moved to the bathroom.", "John went to the hallway."], "Where is Mary?", "bathroom", (1,), 19)
    assert b.context == ["Mary moved to the bathroom.", "John went to the hallway.", "Daniel went back to the hallway."]
    assert (b.answer, b.supporting) == ("north,west", (2, 4))
    assert c.context == ["Sandra journeyed to the office."]  # a line numbered 1 starts a new story


def test_babi_question_without_answer_names_file_and_line(tmp_path):
    path = tmp_path / "qa1_single-supporting-fact_train.txt"
    path.write_text("1 Mary moved to the bathroom.\n2 Where is Mary?\t\t1\n")
    with pytest.raises(CorpusError, match=r"qa1_single-supporting-fact_train.txt:2: question line without an answer"):
        read_babi(path)


def test_babi_reads_the_shared_files(shared_data):
    path = shared_data / "babi" / "en" / "qa1_single-supporting-fact_train.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    examples = read_babi(path)
    assert len(examples) == 1000 and all(e.task == 1 and e.answer and e.context for e in examples)


def test_jsonl_fields_errors_and_empty_records(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    rows = [{"text": "a long mail", "summary": "subject"}, {"text": "", "summary": "x"},
            {"text": "body", "summary": ["s1", "s2"]}]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    records = read_jsonl(path, ["text", "summary"], lists=["summary"])
    assert records.rows == [rows[0], rows[2]] and (records.n_read, records.n_empty) == (3, 1)
    with pytest.raises(CorpusError, match="empty field"):
        read_jsonl(path, ["text", "summary"], strict=True, lists=["summary"])
    with pytest.raises(CorpusError, match=r"d.jsonl.gz:3: field 'summary' must be a string, got \['s1', 's2'\]"):
        read_jsonl(path, ["text", "summary"])  # a source read as a list crashed the task with a traceback
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "summary": "b"}\n{"text": "a"\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid JSON"):
        read_jsonl(bad, ["text", "summary"])
    bad.write_text('{"text": "a", "summary": "b"}\n{"text": "a"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: missing field\(s\) summary"):
        read_jsonl(bad, ["text", "summary"])
    bad.write_text('{"text": 3, "summary": "b"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:1: field 'text' must be a string"):
        read_jsonl(bad, ["text", "summary"])


def test_jsonl_lists_lose_their_blank_strings_and_an_emptied_list_is_an_empty_field(tmp_path):
    """A blank reference is no reference: it would otherwise train on, or score against, an empty target."""
    path = tmp_path / "d.jsonl"
    rows = [{"text": "a", "summary": ["", "s", " "], "more": ["", "m"]}, {"text": "b", "summary": []},
            {"text": "c", "summary": ["  "]}, {"text": "d", "summary": "t", "more": [" "]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = read_jsonl(path, ["text", "summary"], optional=["more"], lists=["summary"])
    assert records.rows == [{"text": "a", "summary": ["s"], "more": ["m"]}, {"text": "d", "summary": "t"}]
    assert (records.n_read, records.n_empty) == (4, 2)
