"""One output through every door (issue 28): for each task, a tiny model directory answers the same
input with the same settings identically through its CLI command, its Python pipeline and its HTTP
route. A QA context longer than the directory's `max_input_tokens` keeps its question in every door."""

import json

import numpy as np
import pytest

from aiayn.cli import main
from aiayn.tasks import load_pipeline
from tiny_models import IMAGE_SIDE, WORDS, tiny_model

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import create_app  # noqa: E402


def http(directory, path, body):
    with TestClient(create_app(directory)) as client:
        response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def cli(capsys, *args):
    capsys.readouterr()
    assert main(list(map(str, args))) == 0
    return capsys.readouterr().out


def test_translation(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "translation")
    lines = ["a b c d", "e f", "g h i j k l"]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    python = load_pipeline(directory)(lines)
    assert cli(capsys, "translate", directory, "-i", tmp_path / "in.txt").splitlines() == python
    assert http(directory, "/translate", {"q": lines, "source": "de", "target": "en"})["translatedText"] == python
    native = http(directory, "/v1/translate", {"text": lines, "method": "greedy", "max_len_b": 5})
    assert [t["text"] for t in native["translations"]] == python


def test_a_beam_size_alone_asks_for_beam_search_in_every_door(tmp_path, capsys):
    """The model's task.json says greedy (tiny_model's); a beam_size without a method means beam
    search through the CLI, Python and HTTP alike (fairseq's --beam, Hugging Face's num_beams)."""
    directory = tiny_model(tmp_path / "m", "translation")
    lines = ["a b c d", "e f", "g h i j k l", "l k j", "b b b c"]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    beam = load_pipeline(directory)(lines, method="beam", beam_size=3)
    assert beam != load_pipeline(directory)(lines)  # the model's own greedy search answers otherwise
    assert load_pipeline(directory)(lines, beam_size=3) == beam
    assert cli(capsys, "translate", directory, "-i", tmp_path / "in.txt", "--beam-size", "3").splitlines() == beam
    native = http(directory, "/v1/translate", {"text": lines, "beam_size": 3})
    assert [t["text"] for t in native["translations"]] == beam
    two = cli(capsys, "translate", directory, "-i", tmp_path / "in.txt", "--beam-size", "3", "--nbest", "2")
    assert len(two.splitlines()) == 2 * len(lines)


def test_summarization(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "summarization", keep="start", max_input_tokens=6)
    texts = ["a b\n c d e f g h i", "j k"]  # a line break inside a text: the pipeline flattens it
    (tmp_path / "in.txt").write_text("a b  c d e f g h i\nj k\n")  # the CLI's one line per text
    python = load_pipeline(directory)(texts)
    assert python == load_pipeline(directory)(["a b c d e f g h i", "j k"])
    assert cli(capsys, "summarize", "--model", directory, "-i", tmp_path / "in.txt").splitlines() == python
    assert http(directory, "/v1/summarize", {"text": texts})["summaries"] == python


def test_qa_keeps_the_question_of_a_long_context_in_every_door(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "qa", keep="end", max_input_tokens=8)
    context, question = " ".join(WORDS[:12] * 3), "k l"  # 36 context words, far over 8 tokens
    pipeline = load_pipeline(directory)
    python = pipeline([(context, question)])
    kept = " ".join(" ".join(WORDS[:12] * 3).split()[-4:]) + " [SEP] k l"  # 7 tokens + EOS: the end is kept
    assert python == pipeline.translator.translate([kept])  # the model saw the question and the latest words
    maps = pipeline.attention((context, question))  # `aiayn plot`'s door
    assert maps.src_labels[:-1] == kept.split()  # the source it drew, before its EOS
    (tmp_path / "q.jsonl").write_text(json.dumps({"context": context, "question": question}) + "\n")
    out = cli(capsys, "answer", "--model", directory, "-i", tmp_path / "q.jsonl")
    assert [json.loads(line)["prediction"] for line in out.splitlines()] == python
    assert cli(capsys, "answer", "--model", directory, "--context", context, "--question", question).strip() == python[0]
    assert cli(capsys, "answer", "--model", directory, "--context", context, "--question", question,
               "-o", tmp_path / "a.txt") == ""  # -o is honoured for the one question too
    assert (tmp_path / "a.txt").read_text() == python[0] + "\n"
    assert http(directory, "/v1/answer", {"context": context, "question": question})["answers"] == python


def test_generation(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "lm", block=8)
    options = {"max_new_tokens": 12, "method": "sample", "seed": 3, "temperature": 1.5}
    prompt = "a b c d e f g h i j"  # longer than the block: the last half block is kept, in every door
    python = load_pipeline(directory)([prompt], **options)[0]
    out = cli(capsys, "generate", "--model", directory, "--prompt", prompt, "--max-new-tokens", 12, "--seed", 3,
              "--temperature", 1.5)
    assert out == prompt + python + "\n"
    assert http(directory, "/v1/generate", {"prompt": prompt, **options})["text"] == python


def test_classification(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "classify", max_input_tokens=4)
    texts = ["a b c d e f", "g h", "i j k l"]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts))
    python = load_pipeline(directory)(texts)
    assert python[0] == load_pipeline(directory)(["a b c d"])[0]  # cut to max_input_tokens, as in training
    lines = cli(capsys, "classify", "--model", directory, "-i", tmp_path / "in.txt").splitlines()
    assert lines == [f"{label}\t{p:.4f}" for label, p in python]
    served = http(directory, "/v1/classify", {"text": texts})["labels"]
    assert [(x["label"], x["probability"]) for x in served] == python
    assert load_pipeline(directory, max_input_tokens=2)(texts[:1]) == load_pipeline(directory)(["a b"])  # honoured
    (tmp_path / "labels.txt").write_text("".join(label + "\n" for label, _ in python))
    scored = cli(capsys, "evaluate", "--model", directory, "--src", tmp_path / "in.txt", "--ref", tmp_path / "labels.txt",
                 "--json")  # the decoding flags it shares with translate are unset: None reaches no pipeline
    assert json.loads(scored)["accuracy"] == 100.0
    with pytest.raises(ValueError, match="a classify model has no batch_tokens option"):
        load_pipeline(directory, batch_tokens=5)  # not silently ignored
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="max_input_tokens must be a whole number of at least 1"):
            load_pipeline(directory, max_input_tokens=bad)


def test_image_classification(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "image-classify")
    images = np.random.default_rng(0).random((3, IMAGE_SIDE, IMAGE_SIDE)).round(3).tolist()
    (tmp_path / "in.txt").write_text("".join(json.dumps(image) + "\n" for image in images))
    python = load_pipeline(directory)(images)
    lines = cli(capsys, "classify", "--model", directory, "-i", tmp_path / "in.txt").splitlines()
    assert lines == [f"{label}\t{p:.4f}" for label, p in python]
    served = http(directory, "/v1/classify", {"image": images})["labels"]
    assert [(x["label"], x["probability"]) for x in served] == python
    assert http(directory, "/v1/classify", {"image": images[0]})["labels"][0]["label"] == python[0][0]


def test_a_command_on_another_tasks_model_names_the_command_that_fits(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "qa", keep="end")
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["translate", str(directory), "-i", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err.strip().endswith("a qa model, which `aiayn translate` does not run; use `aiayn answer`")


@pytest.mark.parametrize("task,command,edit,message", [
    ("classify", "classify", lambda info: info.pop("labels"), "task.json: no labels"),
    ("translation", "translate", lambda info: info["decode"].update(beam_size=0), "task.json: bad decode settings"),
])
def test_a_bad_task_json_is_one_line_naming_its_path(tmp_path, capsys, task, command, edit, message):
    directory = tiny_model(tmp_path / "m", task)
    info = json.loads((directory / "task.json").read_text())
    edit(info)
    (directory / "task.json").write_text(json.dumps(info))
    (tmp_path / "in.txt").write_text("a b\n")
    assert main([command, str(directory), "-i", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{directory / message}" in err and len(err.splitlines()) == 1, err


def test_stdin_reads_as_a_file_does_a_bom_and_dash_included(tmp_path, capsys, monkeypatch):
    """A BOM was dropped from -i FILE but not from stdin (classify then scored another text), and -i - was
    "file not found", where -o - is stdout."""
    import io
    import sys

    directory = tiny_model(tmp_path / "m", "classify")
    text = "\ufeffa b c\nd e\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    from_file = cli(capsys, "classify", directory, "-i", tmp_path / "in.txt")
    for flags in ([], ["-i", "-"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
        assert cli(capsys, "classify", directory, *flags) == from_file, flags


def test_generate_over_http_takes_the_default_prompt(tmp_path):
    """A new line is GenerateOptions's (and the CLI's) prompt: HTTP refused it as empty."""
    from aiayn.data.tokenizer import CharTokenizer

    directory = tiny_model(tmp_path / "m", "lm", tokenizer=CharTokenizer.from_text("ab c\n"))
    assert http(directory, "/v1/generate", {"method": "greedy", "max_new_tokens": 3})["text"] == \
        load_pipeline(directory)(["\n"], method="greedy", max_new_tokens=3)[0]
    words = tiny_model(tmp_path / "w", "lm")  # symbols: no new line to start an empty prompt from
    with TestClient(create_app(words)) as client:
        refused = client.post("/v1/generate", json={})
    assert refused.status_code == 422 and "no new line to start from" in refused.json()["error"]  # was a 500


def test_one_answer_names_the_flag_it_misses(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "qa")
    assert main(["answer", str(directory), "--context", "a b"]) == 2
    assert "--question is missing" in capsys.readouterr().err


def test_embed(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "embed")
    texts = ["a b c", "d e f g h i j k l a b"]  # the second over max_input_tokens: cut in every door
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts))
    python = load_pipeline(directory)(texts)
    lines = cli(capsys, "embed", directory, "-i", tmp_path / "in.txt").splitlines()
    np.testing.assert_allclose([json.loads(line) for line in lines], python, atol=1e-6)
    served = http(directory, "/v1/embed", {"input": texts})
    assert served["object"] == "list" and [d["index"] for d in served["data"]] == [0, 1]
    np.testing.assert_allclose([d["embedding"] for d in served["data"]], python, atol=1e-6)
    cls = http(directory, "/v1/embed", {"input": texts[0], "pooling": "cls", "normalize": True})["data"][0]["embedding"]
    np.testing.assert_allclose(cls, load_pipeline(directory).embed(texts[:1], pooling="cls", normalize=True)[0], atol=1e-6)


def test_a_multilingual_target_through_every_door(tmp_path, capsys):
    directory = tiny_model(tmp_path / "m", "translation", target_tag="<2{}>",
                           directions=[["en", "de"], ["en", "fr"], ["en", "cs"]])
    lines = ["a b c d", "e f"]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    (tmp_path / "ref.txt").write_text("a b\nc d\n")
    for target in ("fr", "cs"):
        python = load_pipeline(directory)(lines, target=target)
        assert python == load_pipeline(directory)([f"<2{target}> {line}" for line in lines])
        assert cli(capsys, "translate", directory, "--target", target, "-i", tmp_path / "in.txt").splitlines() == python
        assert http(directory, "/translate", {"q": lines, "source": "en", "target": target})["translatedText"] == python
        evaluated = cli(capsys, "evaluate", "--model", directory, "--target", target, "--src", tmp_path / "in.txt",
                        "--ref", tmp_path / "ref.txt", "--save-hyp", tmp_path / "hyp.txt")
        assert evaluated and (tmp_path / "hyp.txt").read_text().splitlines() == python
    with TestClient(create_app(directory)) as client:
        typed = client.post("/translate", json={"q": "<2fr> a b", "source": "en", "target": "de"})
    assert typed.status_code == 422 and "starts with the tag '<2fr>'" in typed.json()["error"]


def test_sampling_settings_through_every_door(tmp_path, capsys):
    """/v1/translate refused temperature, top_k, top_p and seed as unknown fields, which the CLI has."""
    directory = tiny_model(tmp_path / "m", "translation")
    lines = ["a b c d", "e f"]
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
    settings = {"method": "sample", "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 3}
    python = load_pipeline(directory)(lines, **settings)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
    assert cli(capsys, "translate", directory, *flags, "-i", tmp_path / "in.txt").splitlines() == python
    native = http(directory, "/v1/translate", {"text": lines, **settings})
    assert [t["text"] for t in native["translations"]] == python
    with TestClient(create_app(directory)) as client:
        refused = client.post("/v1/translate", json={"text": lines, "method": "greedy", "temperature": 0.7})
    assert refused.status_code == 422 and "temperature set for sampling, but the method is 'greedy'" in refused.json()["error"]
