"""Streaming (issue 30): "stream": true on /v1/generate and on greedy or sampled /v1/translate
answers with server-sent events, a piece per event and a last event with the whole text. A real
httpx client reads the first event while the rest is still to be decoded: the decoder waits after
its first piece until the test has read that piece (an event, not a clock)."""

import json
import threading

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="the test extra installs httpx")

from aiayn.serve.app import BatchConfig, create_app  # noqa: E402
from aiayn.tasks import load_pipeline  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

THREAD = BatchConfig(worker="thread")  # the decoder is patched in this process


def events(response) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("lm") / "lm", "lm")


def test_the_first_event_arrives_before_the_last_piece_is_decoded(lm_dir, live_server, monkeypatch):
    from aiayn.tasks.lm import Generator

    first_read, decoded = threading.Event(), []
    stream = Generator.stream

    def gated(self, prompt, **options):
        for i, piece in enumerate(stream(self, prompt, **options)):
            decoded.append(piece)
            yield piece
            if i == 0:
                assert first_read.wait(30), "the client never saw the first piece"

    monkeypatch.setattr(Generator, "stream", gated)
    url = live_server(create_app(lm_dir, batching=THREAD))
    body = {"prompt": "a b", "max_new_tokens": 12, "method": "greedy", "stream": True}
    with httpx.stream("POST", f"{url}/v1/generate", json=body, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: "))[len("data: "):])
        assert len(decoded) == 1 and first == {"piece": decoded[0]}  # read while the rest waits to be decoded
        first_read.set()
        rest = [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
    pieces = [first["piece"]] + [e["piece"] for e in rest[:-1]]
    want = load_pipeline(lm_dir).generate("a b", max_new_tokens=12, method="greedy")
    assert rest[-1] == {"text": want, "done": True} and "".join(pieces) == want and len(pieces) > 1


@pytest.mark.parametrize("method", ["greedy", "sample"])
def test_generate_and_translate_stream_what_they_answer_whole(lm_dir, model_dir, live_server, method):
    url = live_server(create_app([model_dir, lm_dir]))  # worker processes
    body = {"prompt": "a b", "max_new_tokens": 10, "method": method, "seed": 7}
    whole = httpx.post(f"{url}/v1/generate", json=body, timeout=60).json()["text"]
    with httpx.stream("POST", f"{url}/v1/generate", json={**body, "stream": True}, timeout=60) as response:
        got = events(response)
    assert got[-1] == {"text": whole, "done": True} and "".join(e["piece"] for e in got[:-1]) == whole
    if method == "greedy":
        body = {"text": ["a b c"], "method": "greedy"}
        whole = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()["translations"][0]["text"]
        with httpx.stream("POST", f"{url}/v1/translate", json={**body, "stream": True}, timeout=60) as response:
            got = events(response)
        assert got[-1] == {"text": whole, "done": True} and "".join(e["piece"] for e in got[:-1]) == whole


@pytest.mark.parametrize("body", [{"text": ["a b"], "beam_size": 2, "stream": True},  # beam search
                                  {"text": ["a b", "c"], "method": "greedy", "stream": True},
                                  {"text": ["a b"], "method": "greedy", "stream": "yes"}])
def test_what_cannot_stream_is_refused_before_the_stream(model_dir, body):
    from fastapi.testclient import TestClient

    with TestClient(create_app(model_dir, batching=THREAD)) as client:
        response = client.post("/v1/translate", json=body)
        assert response.status_code in (400, 422) and "stream" in response.json()["error"]


def test_the_web_page_shows_generated_text_grow(lm_dir, live_server, chromium, monkeypatch):
    """Headless Chromium on the page of a language model: the output box holds the first piece while the
    decoder waits (for the page to show it), then the whole text."""
    from aiayn.tasks.lm import Generator

    shown_first, stream = threading.Event(), Generator.stream

    def gated(self, prompt, **options):
        for i, piece in enumerate(stream(self, prompt, **options)):
            yield piece
            if i == 0:
                assert shown_first.wait(60), "the page never showed the first piece"

    monkeypatch.setattr(Generator, "stream", gated)
    url = live_server(create_app(lm_dir, batching=THREAD))
    page = chromium.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        page.fill("#prompt", "a b")
        page.click("#translate")
        page.wait_for_function("document.getElementById('output').innerText.length > 0", timeout=60_000)
        first = page.inner_text("#output")
        shown_first.set()
        page.wait_for_function("n => document.getElementById('output').innerText.length > n", arg=len(first),
                               timeout=60_000)
        grown = page.inner_text("#output")
        assert grown.startswith(first) and len(grown) > len(first) and not errors
    finally:
        shown_first.set()
        page.close()


def test_a_blank_source_streams_what_it_translates_to_nothing(model_dir):
    """`run` translates a blank line to "", but `stream` encoded it as [EOS] and decoded a sentence."""
    pipe = load_pipeline(model_dir)
    assert "".join(pipe.stream("  ", method="greedy")) == pipe(["  "], method="greedy")[0] == ""
    assert "".join(pipe.stream("a b c", method="greedy")) == pipe(["a b c"], method="greedy")[0] != ""


def test_stream_true_as_a_form_or_query_field_streams(lm_dir):
    """A form or a query string sends text: stream=true was refused as "stream must be true or false"."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(lm_dir, batching=THREAD)) as client:
        as_json = client.post("/v1/generate", json={"prompt": "a b", "method": "greedy", "max_new_tokens": 3, "stream": True})
        form = client.post("/v1/generate", data={"prompt": "a b", "method": "greedy", "stream": "true"})
        query = client.post("/v1/generate?stream=true&method=greedy&prompt=a%20b")
    assert form.status_code == query.status_code == 200, (form.text, query.text)
    assert form.headers["content-type"].startswith("text/event-stream")
    assert events(form)[-1]["done"] and events(query)[-1]["done"] and events(as_json)[-1]["done"]
