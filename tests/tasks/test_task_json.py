"""A model directory's task.json is checked against its model when a door opens it (`load_pipeline`): a
task that cannot drive the model's type, a "task" that is no name, class names that do not fit the
classifier's head, and a missing max_input_tokens are each a one-line error naming task.json, or for
the last a stated fallback, never an AttributeError, an IndexError or wrong answers."""

import json
import logging

import pytest

from aiayn.cli import main
from aiayn.models import build_model
from aiayn.models.encoder_only import EncoderOnlyConfig
from aiayn.tasks import load_pipeline, task_of
from aiayn.model_dir import write_task_info
from aiayn.tasks.classify import ClassifyData
from tiny_models import WORDS, tiny_model


def retask(directory, **info):
    """Replace the directory's task.json (as `aiayn average --task-from` or a hand edit would)."""
    (directory / "task.json").write_text(json.dumps(info))
    return directory


CLASSIFY_INFO = {"task": "classify", "labels": ["neg", "pos"], "max_input_tokens": 8}


DOORS = {"lm": "generate", "classify": "classify", "translation": "translate"}


@pytest.mark.parametrize("made_as, info, model_type, drives", [
    ("translation", CLASSIFY_INFO, "encoder-decoder", "encoder-only"),  # the fuzzer's: AttributeError ... 'classify'
    ("classify", {"task": "lm", "block": 16}, "encoder-only", "decoder-only"),  # AttributeError ... 'max_output_length'
    ("translation", {"task": "lm", "block": 16}, "encoder-decoder", "decoder-only"),  # generated nonsense
    ("lm", CLASSIFY_INFO, "decoder-only", "encoder-only"),
    ("image-classify", {"task": "lm", "block": 16}, "encoder-only", "decoder-only"),
    ("lm", {"task": "translation"}, "decoder-only", "encoder-decoder or rnn"),
])
def test_a_task_that_cannot_drive_the_model_type_is_refused_naming_task_json_the_task_and_the_type(
        tmp_path, capsys, made_as, info, model_type, drives):
    directory = retask(tiny_model(tmp_path / "m", made_as), **info)
    message = (f"{directory / 'task.json'}: task {info['task']!r} drives {drives} models, but the model of "
               f"{directory} is {model_type}")
    with pytest.raises(ValueError) as caught:
        load_pipeline(directory)
    assert str(caught.value).startswith(message)
    (tmp_path / "in.txt").write_text("a b\n")
    command = DOORS[info["task"]]
    capsys.readouterr()
    assert main([command, str(directory), *(["-i", str(tmp_path / "in.txt")] if command != "generate" else
                                            ["--prompt", "a b", "--max-new-tokens", "3"])]) == 2
    err = capsys.readouterr().err
    assert f"aiayn {command}: error: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("task", [5, None, ["classify"], {"a": 1}, "", True])
def test_a_task_that_is_not_a_name_is_refused_naming_task_json(tmp_path, capsys, task):
    directory = retask(tiny_model(tmp_path / "m", "classify"), **{**CLASSIFY_INFO, "task": task})
    expected = f"{directory / 'task.json'}: task must be a task name (a string such as 'translation'), got {task!r}"
    for door in (task_of, load_pipeline):
        with pytest.raises(ValueError) as caught:
            door(directory)
        assert str(caught.value) == expected
    (tmp_path / "in.txt").write_text("a b\n")
    capsys.readouterr()
    assert main(["classify", str(directory), "-i", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err == f"aiayn classify: error: {expected}\n"


@pytest.mark.parametrize("task, labels, expected", [
    ("classify", ["a"], "labels names 1 class for a model of 2 (config.json's n_classes)"),  # IndexError on class 1
    ("classify", ["a", "b", "c"], "labels names 3 classes for a model of 2"),  # accepted silently
    ("classify", [None, {"a": 1}], "labels must be strings (the class names), found None"),  # printed as given
    ("classify", ["a", 2], "labels must be strings (the class names), found 2"),
    ("image-classify", ["dark"], "labels names 1 class for a model of 2"),
])
def test_the_labels_must_be_one_string_per_class_of_the_head(tmp_path, task, labels, expected):
    directory = tiny_model(tmp_path / "m", task, labels=labels)
    with pytest.raises(ValueError) as caught:
        load_pipeline(directory)
    assert str(caught.value).startswith(f"{directory / 'task.json'}: {expected}")


def short_classifier(directory, max_positions: int = 16, **info):
    """A tiny classifier of `max_positions` positions ([CLS] one of them) whose task.json is `info`."""
    from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers

    tokenizer = SymbolTokenizer(WORDS)
    config = EncoderOnlyConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                               n_classes=2, max_positions=max_positions)
    build_model("encoder-only", config).save_pretrained(directory)
    save_tokenizers(TokenizerPair.shared(tokenizer), directory)
    write_task_info(directory, {"task": "classify", "labels": ["neg", "pos"], **info})
    return directory


def test_a_classifier_without_max_input_tokens_cuts_to_the_default_or_all_its_positions_and_says_so(tmp_path, caplog):
    """task.json without max_input_tokens said "max_input_tokens 127 does not fit the model" of a model of
    fewer positions, without a word of where 127 came from (the training default)."""
    with caplog.at_level(logging.WARNING):
        assert load_pipeline(short_classifier(tmp_path / "short")).max_length == 15  # all the model holds
    assert f"{tmp_path / 'short' / 'task.json'} has no max_input_tokens: inputs are cut to 15 tokens" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert load_pipeline(short_classifier(tmp_path / "long", 512)).max_length == ClassifyData.max_input_tokens
    assert "cut to 127 tokens (the training default)" in caplog.text
    assert load_pipeline(short_classifier(tmp_path / "old", max_length=9)).max_length == 9  # the earlier name
    assert load_pipeline(tmp_path / "short", max_input_tokens=4).max_length == 4  # an option wins


@pytest.mark.parametrize("info, expected", [
    ({"max_input_tokens": 20}, "task.json: max_input_tokens 20 does not fit the model: its max_positions 16"),
    ({"max_length": 20}, "task.json: max_input_tokens 20 does not fit the model"),
    ({"max_input_tokens": "8"}, "task.json: max_input_tokens must be a whole number of at least 1, got '8'"),
    ({"max_input_tokens": 0}, "task.json: max_input_tokens must be a whole number of at least 1, got 0"),
])
def test_a_max_input_tokens_the_model_cannot_take_is_refused_naming_task_json(tmp_path, info, expected):
    directory = short_classifier(tmp_path / "m", **info)
    with pytest.raises(ValueError) as caught:
        load_pipeline(directory)
    assert str(caught.value).startswith(f"{directory}/{expected}")
