"""`aiayn serve` under hostile or careless input (issue 33): a 4xx with a short message, never a 500,
a traceback or an echo of the whole input; slow clients cut off; /metrics counting what went wrong."""

import dataclasses
import json
import re
import select
import socket
import time
import urllib.request
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import BatchConfig, ServeLimits, create_app, serve  # noqa: E402
from tiny_models import task_clients  # noqa: E402


@pytest.fixture(scope="module")
def clients(task_dirs):
    """task -> a TestClient of a server on that task's tiny model; 500s come back as responses."""
    with task_clients(task_dirs, raise_server_exceptions=False) as opened:
        yield opened


def post_json(client, path: str, body: bytes):
    return client.post(path, content=body, headers={"content-type": "application/json"})


# -- item 4: numbers that are not finite, or not of the field's type ---------------------------
NUMBER_FIELDS = [
    ("translation", "/v1/translate", '{"text": ["a b"], "length_penalty": %s}'),
    ("translation", "/v1/translate", '{"text": ["a b"], "beam_size": %s}'),
    ("lm", "/v1/generate", '{"prompt": "a b", "temperature": %s}'),
    ("lm", "/v1/generate", '{"prompt": "a b", "top_p": %s}'),
    ("lm", "/v1/generate", '{"prompt": "a b", "seed": %s}'),
    ("lm", "/v1/generate", '{"prompt": "a b", "seed": %s, "stream": true}'),
    ("lm", "/v1/generate", '{"prompt": "a b", "top_k": %s}'),
    ("image-classify", "/v1/classify", '{"image": [[0.5, %s], [0.5, 0.5]]}'),
]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
@pytest.mark.parametrize("task,path,body", NUMBER_FIELDS)
def test_a_number_that_is_not_finite_is_a_422(clients, task, path, body, number):
    response = post_json(clients[task], path, (body % number).encode())
    assert response.status_code == 422, response.text
    assert "finite" in response.json()["error"]


@pytest.mark.parametrize("number", [10**400, 2**64, -2**63 - 1])
@pytest.mark.parametrize("task,path,body", NUMBER_FIELDS)
def test_an_integer_over_64_bits_is_a_422(clients, task, path, body, number):
    """10**400 overflows a float check; 2**64 is past what torch takes as a seed."""
    response = post_json(clients[task], path, (body % number).encode())
    assert response.status_code == 422, response.text
    assert "64 bits" in response.json()["error"]


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_the_limit_is_a_413_before_it_is_parsed(clients, content_type, declared):
    """Refused on its Content-Length, or, sent in chunks without one, once the bytes pass the limit."""
    limit = ServeLimits().max_body_bytes
    body = b'{"q": "a"' + b" " * limit + b"}"
    content = body if declared else iter([body[:limit // 2], body[limit // 2:]])
    response = clients["translation"].post("/translate", content=content, headers={"content-type": content_type})
    assert response.status_code == 413 and "request body is over" in response.json()["error"], response.text
    assert clients["translation"].post("/translate", json={"q": "a b", "source": "de", "target": "en"}).status_code == 200


def test_an_image_of_too_many_patches_or_two_sizes_in_a_request_is_a_422(clients):
    client = clients["image-classify"]
    too_big = client.post("/v1/classify", json={"image": [[0.5] * 40] * 40})
    assert too_big.status_code == 422 and "400 patches" in too_big.json()["error"], too_big.text
    mixed = client.post("/v1/classify", json={"image": [IMAGE, [[0.5] * 2] * 2]})
    assert mixed.status_code == 422 and "one size" in mixed.json()["error"], mixed.text
    assert client.post("/v1/classify", json={"image": [IMAGE, IMAGE]}).status_code == 200


@pytest.mark.parametrize("fields,message", [
    ({"seed": 1.5}, "seed must be"),  # was a 500: torch's manual_seed takes no float
    ({"top_k": 2.5}, "top_k must be"),
    ({"prompt": ["a b"]}, "prompt must be a string"),  # was a 500: one prompt per request
    ({"max_new_tokens": 10 ** 30}, "integers must fit in 64 bits"),  # refused as the JSON is read
    ({"max_new_tokens": 10 ** 12}, "max_new_tokens must be"),
    ({"temperature": 0.5, "seed": 3}, "temperature set for sampling, but the method is 'greedy'"),  # not ignored
])
def test_generate_refuses_a_value_of_the_wrong_type(clients, fields, message):
    response = clients["lm"].post("/v1/generate", json={"prompt": "a b", "method": "greedy", **fields})
    assert response.status_code == 422 and message in response.json()["error"], response.text


def test_an_integer_too_long_to_read_is_a_400(clients):
    body = b'{"text": ["a"], "max_len_b": 1' + b"0" * 5000 + b"}"
    response = post_json(clients["translation"], "/v1/translate", body)
    assert response.status_code == 400 and "malformed JSON body" in response.json()["error"]


# -- item 5: JSON nested deeper than any request needs ---------------------------------------
@pytest.mark.parametrize("task,path,body", [
    ("translation", "/translate", b"[" * 100_000),
    ("translation", "/v1/translate", b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("summarization", "/v1/summarize", b'{"text": ' + b"{" * 100_000),
    ("qa", "/v1/answer", b'{"context": "a", "question": ' + b'[{"a": ' * 50_000 + b"}]" * 50_000 + b"}"),
])
def test_deeply_nested_json_is_refused_before_parsing(clients, task, path, body):
    response = post_json(clients[task], path, body)
    assert response.status_code == 400, response.text
    assert "nests" in response.json()["error"] and "at most" in response.json()["error"]


def test_brackets_inside_a_string_do_not_count_as_nesting(clients):
    from aiayn.serve.requests import MAX_JSON_DEPTH, json_depth

    text = "[" * 100 + ' \\" {{ ' + "]" * 3  # an escaped quote does not end the string
    assert json_depth(json.dumps({"text": [text]}).encode()) == 2
    assert json_depth(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) == MAX_JSON_DEPTH
    response = clients["summarization"].post("/v1/summarize", json={"text": [text]})
    assert response.status_code == 200, response.text


def test_a_multipart_body_without_a_boundary_is_a_400_in_the_servers_error_shape(clients):
    response = clients["translation"].post("/translate", content=b"q=a", headers={"content-type": "multipart/form-data"})
    assert response.status_code == 400 and response.json()["error"].startswith("malformed form body: ")


def test_an_unclosed_string_is_one_match_to_the_end_and_its_body_a_400(clients):
    """Quotes that never close ('"\\"\\"...') were tried as a string start at every quote, each
    try running to the end: quadratic in the body's length, on the event loop. One match to the end
    now; the brackets after it are the string's, and json.loads says what is wrong."""
    from aiayn.serve.requests import _JSON_STRING, json_depth

    body = b'{"text": "' + b'\\"' * 20_000 + b"[[[{"
    assert [m.span() for m in _JSON_STRING.finditer(body)] == [(1, 7), (9, len(body))]
    assert json_depth(body) == 1
    response = post_json(clients["translation"], "/v1/translate", body)
    assert response.status_code == 400 and "malformed JSON body: Unterminated string" in response.json()["error"]


# -- item 13: an error never echoes the whole input -------------------------------------------
MB = "x" * 1_000_000


@pytest.mark.parametrize("task,path,fields,status", [
    ("translation", "/translate", {"q": "a", "source": MB}, 400),
    ("translation", "/translate", {"q": "a", "format": MB}, 422),
    ("translation", "/translate", {"q": "a", MB: 1}, 422),  # an unknown field named by a megabyte
    ("translation", "/v1/translate", {"text": MB}, 422),
    ("translation", "/v1/translate", {"text": ["a"], "method": MB}, 422),
    ("translation", "/v1/translate", {"text": [MB]}, 413),
    ("lm", "/v1/generate", {"prompt": [MB]}, 422),
    ("lm", "/v1/generate", {"prompt": "a", "method": MB}, 422),
    ("summarization", "/v1/summarize", {"text": "a", "unknown": 1, MB: 2}, 422),
])
def test_an_error_never_echoes_a_megabyte_of_input(clients, task, path, fields, status):
    response = clients[task].post(path, json=fields)
    assert response.status_code == status, response.text[:300]
    assert len(response.content) < 1000, response.text[:300]


def test_a_validation_error_echoes_a_short_input_and_a_float_json_cannot_write(task_dirs):
    from pydantic import BaseModel

    class Typed(BaseModel):
        n: int
        x: float = 0.0

    app = create_app(task_dirs["translation"])

    @app.post("/typed")  # FastAPI validates this route's body (RequestValidationError)
    async def typed(body: Typed):
        return {"n": body.n}

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/typed", json={"n": MB})
        assert response.status_code == 422 and len(response.content) < 1000, response.text[:300]
        assert response.json()["detail"][0]["loc"] == ["body", "n"]
        missing = post_json(client, "/typed", b'{"x": NaN}')  # the error's input holds a NaN
        assert missing.status_code == 422 and "nan" in missing.json()["detail"][0]["input"], missing.text


# -- item 11: /metrics counts the 4xx and 5xx answers -----------------------------------------
def test_metrics_count_responses_by_status_class(task_dirs, monkeypatch):
    from aiayn.serve.routes import translation as routes
    from aiayn.tasks.translation import TranslationPipeline

    async def broken(pipeline, body, server):
        raise KeyError("a bug in a handler")

    def failing(self, items, **options):
        raise RuntimeError("a bug in decoding")

    monkeypatch.setattr(routes, "ROUTES", tuple(dataclasses.replace(r, handler=broken) if r.path == "/languages" else r
                                                for r in routes.ROUTES))  # a 500 from the app itself
    app = create_app(task_dirs["translation"], batching=BatchConfig(worker="thread"))  # run is patched in this process
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/translate", json={"q": "a b", "source": "de", "target": "en"}).status_code == 200
        for _ in range(3):
            assert client.get("/languages").status_code == 500
        assert client.post("/translate", json={"q": ""}).status_code == 422
        assert client.post("/translate", json={"q": "a", "bogus": 1}).status_code == 422
        assert client.get("/nowhere").status_code == 404
        monkeypatch.setattr(TranslationPipeline, "run", failing)  # a 500 from the batcher's worker
        assert client.post("/translate", json={"q": "a b"}).status_code == 500
        metrics = client.get("/v1/metrics").json()
    assert metrics["responses"] == {"2xx": 1, "4xx": 3, "5xx": 4}
    assert metrics["errors"] == 1  # the batcher's own count: decoding failures only


# -- item 6: a slow client is cut off, and others are served meanwhile ------------------------
BODY = b'{"q": "a b", "source": "de", "target": "en"}'
HEAD = (b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY))
BOUND = 1.0  # seconds to send a whole request, in these tests


def served(url: str) -> bool:
    request = urllib.request.Request(url + "/translate", BODY, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status == 200


HANG_GUARD = 30.0  # seconds: not a bound under test, only so that a socket the server never closes fails the test


def closed_by_server(sock, trickle: bytes = b"") -> bytes | None:
    """What the server sent on `sock` before it closed it (`trickle` sent a byte every 0.1 s meanwhile),
    or None if it was still open after HANG_GUARD seconds."""
    received, deadline = b"", time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        try:
            if trickle:
                sock.sendall(trickle[:1])
                trickle = trickle[1:]
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                data = sock.recv(4096)
                if data == b"":
                    return received
                received += data
        except (ConnectionResetError, BrokenPipeError):
            return received
    return None


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_slow_client_is_closed_within_the_bound_and_others_are_served(task_dirs, live_server, http):
    pytest.importorskip(http)
    limits = ServeLimits(receive_timeout_s=BOUND)
    url = live_server(create_app(task_dirs["translation"], limits=limits), limits=limits, http=http)
    address = urlsplit(url).hostname, urlsplit(url).port
    slow = {"nothing": b"", "half the headers": HEAD[: len(HEAD) // 2], "half the body": HEAD + BODY[:10],
            "a byte at a time": b""}
    sockets = {name: socket.create_connection(address, timeout=10) for name in slow}
    for name, sent in slow.items():
        sockets[name].sendall(sent)
    assert all(served(url) for _ in range(3))  # while the slow clients hold their connections
    try:
        outcome = {name: closed_by_server(sock, HEAD + BODY if name == "a byte at a time" else b"")
                   for name, sock in sockets.items()}
    finally:
        for sock in sockets.values():
            sock.close()
    # closed by the server, unanswered (the trickle needs about 13 s to send the whole request); no timing is
    # asserted: the guard only ends a wait for a close that never comes, and is shorter than the keep-alive,
    # so no close here is uvicorn's idle timeout
    assert HANG_GUARD < limits.keep_alive_s
    assert outcome == {name: b"" for name in slow}, f"None: still open after {HANG_GUARD} s; bytes: answered"
    assert served(url)


def test_the_bound_covers_receiving_only(task_dirs, live_server, monkeypatch):
    """A decode longer than the bound is answered, and an idle keep-alive connection stays open
    past the bound: the deadline ends when a request has arrived and starts with the next one."""
    from aiayn.tasks.translation import TranslationPipeline

    run = TranslationPipeline.run

    def slow_run(self, items, **options):
        time.sleep(2 * BOUND)
        return run(self, items, **options)

    limits = ServeLimits(receive_timeout_s=BOUND)
    app = create_app(task_dirs["translation"], batching=BatchConfig(worker="thread"), limits=limits)  # run is patched here
    url = urlsplit(live_server(app, limits=limits))
    monkeypatch.setattr(TranslationPipeline, "run", slow_run)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(HEAD + BODY)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # after 2 s of decoding
        monkeypatch.setattr(TranslationPipeline, "run", run)
        time.sleep(1.5 * BOUND)  # idle between requests
        sock.sendall(HEAD + BODY)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("host,warns", [("127.0.0.1", False), ("localhost", False), ("::1", False),
                                        ("0.0.0.0", True), ("192.168.1.5", True), ("example.org", True)])
def test_serve_on_a_reachable_host_without_a_key_warns(task_dirs, monkeypatch, caplog, host, warns):
    monkeypatch.setattr("uvicorn.Server.run", lambda server: None)  # serve builds the app and its config, no more
    serve(task_dirs["translation"], host=host)
    assert ("without an api key" in caplog.text) == warns
    caplog.clear()
    serve(task_dirs["translation"], host=host, limits=ServeLimits(api_key="k"))
    assert "without an api key" not in caplog.text


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf")])
def test_the_receive_timeout_must_be_a_positive_number_of_seconds(seconds):
    with pytest.raises(ValueError, match="receive timeout must be a positive number of seconds"):
        ServeLimits(receive_timeout_s=seconds)


def test_an_image_that_is_not_rows_of_numbers_is_a_422(clients):
    for image in ([["dark", "light"], ["dark", "light"]], [[0.5], [0.5, 0.5]], [[None, 0.5]], "pixels"):
        response = clients["image-classify"].post("/v1/classify", json={"image": image})
        assert response.status_code == 422 and "pixel rows" in response.json()["error"], (image, response.text)


# -- item 18: the web page uses the directory's own route -------------------------------------
IMAGE = [[0.0, 0.25, 0.5, 0.75]] * 4
PAGE = {  # task -> (what is typed in which box, the request the page should send)
    "summarization": ({"text": "a b c d"}, {"text": "a b c d"}),
    "qa": ({"context": "a b c", "question": "d"}, {"context": "a b c", "question": "d"}),
    "lm": ({"prompt": "a b"}, {"prompt": "a b", "stream": True}),  # streamed: see test_streaming.py
    "classify": ({"text": "a b c"}, {"text": "a b c"}),
    "image-classify": ({"image": json.dumps(IMAGE)}, {"image": IMAGE}),
}


def shown(answer: dict) -> str:
    """What the page shows of an answer: its first output's text, or its label and probability."""
    output = next(iter(answer.values()))
    output = output[0] if isinstance(output, list) else output
    return output if isinstance(output, str) else f"{output['label']} (probability {output['probability']:.3f})"


@pytest.mark.parametrize("task", list(PAGE))
def test_the_web_page_asks_the_models_own_route(task_dirs, live_server, chromium, task):
    typed, sent = PAGE[task]
    url = live_server(create_app(task_dirs[task]))
    route = TestClient(create_app(task_dirs[task])).get("/health").json()["forms"][0]["path"]
    page = chromium.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        for box, text in typed.items():
            page.fill(f"#{box}", text)
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        response = answered.value
        assert (urlsplit(response.url).path, response.status) == (route, 200)
        assert response.request.post_data_json == sent
        if response.headers["content-type"].startswith("text/event-stream"):  # the last event holds the whole text
            # which may be empty: the test's tiny model samples, and may end at once
            last = json.loads(response.text().strip().split("\n")[-1][len("data: "):])
            # a continuation starts with the space that follows the prompt: the page need not show it
            page.wait_for_function("want => document.getElementById('output').innerText.trim() === want.trim()",
                                   arg=last["text"])
            assert page.inner_text("#output").strip() == last["text"].strip()
        else:
            page.locator("#output").filter(has_text=re.compile(r"\S")).wait_for(timeout=30_000)
            assert page.inner_text("#output") == shown(response.json())
        assert page.locator("#controls").is_hidden() and page.inner_text("#error") == "" and not errors
    finally:
        page.close()


def test_the_web_page_of_several_models_reaches_each_and_each_language_pair(tmp_path, live_server, chromium):
    """A server of a multilingual model and a language model: the page offered only the first model's form,
    and posted without source and target (every text came out in the first target)."""
    from tiny_models import tiny_model

    multi = tiny_model(tmp_path / "multi", "translation", target_tag="<2{}>",
                       directions=[["en", "de"], ["en", "fr"], ["en", "cs"]])
    url = live_server(create_app([multi, tiny_model(tmp_path / "lm", "lm")]))
    page = chromium.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        page.locator("#pair").wait_for()
        assert page.locator("#form option").all_inner_texts() == ["translation: POST /v1/translate",
                                                                   "lm: POST /v1/generate"]
        assert page.locator("#pair option").all_inner_texts() == ["en → de", "en → fr", "en → cs"]
        page.select_option("#pair", "en fr")
        page.fill("#text", "a b")
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        sent = answered.value.request.post_data_json
        assert (sent["source"], sent["target"], answered.value.status) == ("en", "fr", 200)
        page.select_option("#form", "1")  # the language model's form
        assert page.locator("#prompt").count() == 1 and page.locator("#pair").count() == 0
        page.fill("#prompt", "a b")
        with page.expect_response(lambda r: r.request.method == "POST", timeout=30_000) as answered:
            page.click("#translate")
        assert urlsplit(answered.value.url).path == "/v1/generate" and answered.value.status == 200
        assert not errors
    finally:
        page.close()


# -- items 12, 14, 16: what the routes refuse ------------------------------------------------
@pytest.mark.parametrize("options", [{"beam_size": 2, "nbest": 3}, {"method": "greedy", "nbest": 2},
                                     {"beam_size": 1, "nbest": 2}])
def test_nbest_over_the_beam_is_refused_not_clamped(clients, options):
    response = clients["translation"].post("/v1/translate", json={"text": ["a b"], **options})
    assert response.status_code == 422 and "needs beam search with beam_size >=" in response.json()["error"]


def test_nbest_within_the_beam_gives_that_many_hypotheses(clients):
    response = clients["translation"].post("/v1/translate", json={"text": ["a b"], "beam_size": 3, "nbest": 3})
    assert response.status_code == 200 and len(response.json()["translations"][0]["hypotheses"]) == 3


@pytest.mark.parametrize("task,path,fields", [
    ("translation", "/translate", {"q": "a b", "source": "de", "target": "en"}),
    ("translation", "/v1/translate", {"text": ["a b"]}),
    ("summarization", "/v1/summarize", {"text": "a b"}),
    ("qa", "/v1/answer", {"context": "a b", "question": "c"}),
    ("lm", "/v1/generate", {"prompt": "a b", "max_new_tokens": 2}),
    ("classify", "/v1/classify", {"text": "a b"}),
    ("image-classify", "/v1/classify", {"image": IMAGE}),
])
def test_an_unknown_field_is_a_422_naming_it(clients, task, path, fields):
    assert clients[task].post(path, json=fields).status_code == 200
    response = clients[task].post(path, json={**fields, "beam": 4})
    assert response.status_code == 422 and "unknown field(s) beam" in response.json()["error"], response.text


@pytest.mark.parametrize("task,path,body,where", [
    ("translation", "/translate", '{"q": "a \\ud800 b", "source": "de", "target": "en"}', "q: "),
    ("translation", "/v1/translate", '{"text": ["a b", "a \\udcff"]}', "text[1]: "),
    ("summarization", "/v1/summarize", '{"text": "\\ud800"}', "text: "),
    ("qa", "/v1/answer", '{"context": "a b", "question": "c \\udfff"}', "question: "),
    ("lm", "/v1/generate", '{"prompt": "a \\ud800", "max_new_tokens": 2}', "prompt: "),
    ("classify", "/v1/classify", '{"text": ["a", "\\ud800"]}', "text[1]: "),
])
def test_a_lone_surrogate_in_a_text_is_a_422(clients, task, path, body, where):
    """JSON's "\\ud800" is a str no tokenizer takes: a sentencepiece model answered 500 "decoding failed"."""
    response = post_json(clients[task], path, body.encode())
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(where) and "lone surrogate" in response.json()["error"]


@pytest.mark.parametrize("extra", [{}, {"method": "greedy", "stream": True}])
def test_decoding_fields_that_cannot_go_together_are_a_422(clients, extra):
    """min_len beyond the vocabulary with no_repeat_ngram_size 1: each field is in bounds, the pair is not
    (`aiayn translate` refuses it too); the server answered a plain-text 500."""
    body = {"text": ["a b"], "min_len": 200, "no_repeat_ngram_size": 1, **extra}
    response = clients["translation"].post("/v1/translate", json=body)
    assert response.status_code == 422, response.text
    assert "cannot be met with no_repeat_ngram_size 1" in response.json()["error"]


def test_libretranslate_refuses_html(clients):
    fields = {"q": "<b>a</b> b", "source": "de", "target": "en"}
    assert clients["translation"].post("/translate", json={**fields, "format": "text"}).status_code == 200
    response = clients["translation"].post("/translate", json={**fields, "format": "html"})
    assert response.status_code == 422 and "format must be 'text'" in response.json()["error"]


@pytest.mark.parametrize("context,question", [("", "c"), ("a b", ""), ("  ", "c"), ("a b", "\n"),
                                              (["a b", ""], ["c", "d"])])
def test_answer_refuses_an_empty_context_or_question(clients, context, question):
    response = clients["qa"].post("/v1/answer", json={"context": context, "question": question})
    assert response.status_code == 422, response.text
