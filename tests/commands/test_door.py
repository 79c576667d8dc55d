"""`aiayn.commands.door`, the commands that answer with a model, given the wrong directory or empty input: one
error line that says what to do, and help that says where unset decoding flags come from."""

import dataclasses
import json

import pytest

from aiayn.cli import main
from aiayn.config import DecodeConfig
from aiayn.tasks import load_pipeline
from tiny_models import tiny_model

GREEDY_2 = dataclasses.asdict(DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=2))  # task.json: 2 pieces out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {task: tiny_model(root / task, task, decode=GREEDY_2)
            for task in ("translation", "summarization", "qa", "lm", "classify", "embed")}


def error_line(capsys, argv: list) -> str:
    """The one line on stderr of a command that fails with exit status 2."""
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# -- a command on another task's directory names the command that fits ----------------
@pytest.mark.parametrize("command,task,fits", [
    ("translate", "lm", "generate"),  # was AttributeError: 'EncoderOnly' ... 'max_input_length'
    ("translate", "classify", "classify"),
    ("translate", "summarization", "summarize"),
    ("summarize", "qa", "answer"),
    ("answer", "translation", "translate"),
    ("generate", "classify", "classify"),
    ("classify", "lm", "generate"),
])
def test_a_command_on_another_tasks_directory_names_the_command_that_fits(dirs, capsys, tmp_path, command, task, fits):
    (tmp_path / "in.txt").write_text("a b\n")
    extra = ["--prompt", "a"] if command == "generate" else ["-i", tmp_path / "in.txt"]
    line = error_line(capsys, [command, dirs[task], *extra])
    assert line.endswith(f"a {task} model, which `aiayn {command}` does not run; use `aiayn {fits}`"), line


# -- a path that is no model directory is called that ---------------------------------
@pytest.mark.parametrize("command", ["translate", "summarize", "answer", "generate", "classify"])
def test_a_path_that_is_no_model_directory_is_called_that(capsys, tmp_path, command):
    (tmp_path / "in.txt").write_text("a b\n")
    (tmp_path / "empty").mkdir()
    for path, says in ((tmp_path / "missing", "model directory not found"),
                       (tmp_path / "empty", "not a model directory (no config.json)")):
        extra = ["--prompt", "a"] if command == "generate" else ["-i", tmp_path / "in.txt"]
        line = error_line(capsys, [command, "--model", path, *extra])
        assert says in line and "translation model" not in line, line


# -- every door takes the model directory as MODEL or as --model MODEL -----------------------
DOORS = {"translate": "translation", "summarize": "summarization", "answer": "qa", "generate": "lm",
         "classify": "classify", "embed": "embed"}


def door_input(command: str, tmp_path) -> list:
    if command == "generate":
        return ["--prompt", "a", "--method", "greedy", "--max-new-tokens", "3"]
    line = json.dumps({"context": "a b", "question": "c"}) if command == "answer" else "a b c"
    (tmp_path / "in.txt").write_text(line + "\n")
    return ["-i", tmp_path / "in.txt"]


@pytest.mark.parametrize("command", sorted(DOORS))
def test_every_door_takes_the_model_as_MODEL_or_as_the_model_flag(dirs, capsys, tmp_path, command):
    extra = [str(a) for a in door_input(command, tmp_path)]
    outputs = []
    for model in ([dirs[DOORS[command]]], ["--model", dirs[DOORS[command]]]):
        capsys.readouterr()
        assert main([command, *map(str, model), *extra]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].strip()


@pytest.mark.parametrize("command", sorted(DOORS))
def test_a_door_refuses_no_model_or_two(dirs, capsys, tmp_path, command):
    extra = door_input(command, tmp_path)
    line = error_line(capsys, [command, *extra])
    assert line == f"aiayn {command}: error: no model directory: aiayn {command} MODEL ... (or --model MODEL)", line
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in (command, dirs[DOORS[command]], "--model", dirs[DOORS[command]], *extra)])
    assert stop.value.code == 2 and "given twice (MODEL and --model)" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--bogus", "x"], ["--quantize", "int8"]])
def test_an_unknown_option_is_named_not_read_as_a_second_model(dirs, capsys, argv):
    """`--bogus x`: x reads as a MODEL too; the error named the model twice, not the option."""
    with pytest.raises(SystemExit) as stop:
        main(["generate", "--model", str(dirs["lm"]), *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"unrecognized arguments: {argv[0]}" in err and "twice" not in err


def test_serve_takes_its_models_as_MODEL_or_as_repeated_model_flags_and_refuses_none(capsys):
    from aiayn.cli import build_parser

    parse = lambda *argv: build_parser().parse_args(["serve", *argv]).model  # noqa: E731
    assert parse("a", "b") == parse("--model", "a", "--model", "b") == parse("--model", "a", "b") == ["a", "b"]
    assert parse("a", "--model", "b") == ["a", "b"]  # in the order given
    line = error_line(capsys, ["serve", "--port", "0"])
    assert line == "aiayn serve: error: no model directory: aiayn serve MODEL [MODEL ...] (or --model MODEL, repeated)"


# -- QA refuses an empty context or question in every door ---------------------------
@pytest.mark.parametrize("context,question", [("", "k l"), ("a b", ""), ("  ", "k l"), ("a b", " \t")])
def test_answer_refuses_an_empty_context_or_question(dirs, capsys, tmp_path, context, question):
    line = error_line(capsys, ["answer", "--model", dirs["qa"], "--context", context, "--question", question])
    assert "must not be empty" in line or "must be a non-empty string" in line, line
    (tmp_path / "q.jsonl").write_text(json.dumps({"context": "a b", "question": "c"}) + "\n"
                                      + json.dumps({"context": context, "question": question}) + "\n")
    line = error_line(capsys, ["answer", "--model", dirs["qa"], "-i", tmp_path / "q.jsonl"])
    assert "q.jsonl:2" in line and "non-empty string" in line, line
    with pytest.raises(ValueError, match="must not be empty"):
        load_pipeline(dirs["qa"]).answer(context, question)


# -- unset decoding flags take task.json's settings, and the help says so ------------
@pytest.mark.parametrize("command", ["summarize", "answer"])
def test_decoding_help_says_unset_flags_take_task_json(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "unset flags take the model directory's own settings (task.json)" in help_text


def test_unset_decoding_flags_take_task_json_and_set_ones_override_it(dirs, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("a b c d e f\n")
    capsys.readouterr()
    assert main(["summarize", "--model", str(dirs["summarization"]), "-i", str(tmp_path / "in.txt")]) == 0
    assert len(capsys.readouterr().out.split()) == 2  # task.json: max_len_a 0, max_len_b 2 (the model runs to it)
    assert main(["summarize", "--model", str(dirs["summarization"]), "-i", str(tmp_path / "in.txt"),
                 "--max-len-b", "4"]) == 0
    assert len(capsys.readouterr().out.split()) == 4


# -- bytes in argv that are not UTF-8 reach a sentencepiece model as text, as they do from a file ---------
@pytest.fixture(scope="module")
def spm_dirs(tmp_path_factory):
    from aiayn.data.tokenizer import SentencePieceTokenizer

    texts = [f"the {w} sat on the mat near {v}" for w in ("cat", "dog", "fox", "owl") for v in ("a", "b", "c", "d")]
    tok = SentencePieceTokenizer.train(texts=texts * 4, vocab_size=40, byte_fallback=False)
    root = tmp_path_factory.mktemp("spm")
    return {task: tiny_model(root / task, task, tokenizer=tok, decode=GREEDY_2) for task in ("translation", "lm", "qa")}


@pytest.mark.parametrize("task,argv", [
    ("lm", ["generate", "{dir}", "--prompt", "the \udcff cat", "--max-new-tokens", "2", "--method", "greedy"]),
    ("qa", ["answer", "{dir}", "--context", "the \udcff cat", "--question", "the cat"]),
    ("translation", ["plot", "attention", "--model", "{dir}", "--sentence", "the \udcff cat", "-o", "{tmp}/a.png"]),
])
def test_argv_bytes_that_are_not_utf8_are_replaced_as_in_a_file(spm_dirs, tmp_path, capsys, task, argv):
    """Python keeps such bytes of argv as lone surrogates (`$'\\xff'` in a shell), which sentencepiece's binding
    cannot take: the command failed with pybind's "Unable to cast Python instance"."""
    assert main([a.format(dir=spm_dirs[task], tmp=tmp_path) for a in argv]) == 0, capsys.readouterr().err


def test_a_prompt_outside_the_vocabulary_is_named_in_a_warning(dirs, caplog):
    """Symbols a..l: "a ü b" has one piece the model cannot read, which became <unk> without a word."""
    with caplog.at_level("WARNING", logger="aiayn.tasks.lm"):
        load_pipeline(dirs["lm"]).prompt_ids("a ü b")
    assert "1 of the prompt's 3 tokens are not in the model's vocabulary" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="aiayn.tasks.lm"):
        load_pipeline(dirs["lm"]).prompt_ids("a b")
    assert "vocabulary" not in caplog.text
