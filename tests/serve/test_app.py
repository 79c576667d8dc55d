"""`aiayn serve`: the LibreTranslate API in its three request styles, the native API with attention,
every bad input as a clear 4xx, operations endpoints, and deep-translator as a real client."""

import dataclasses
import threading
import time

import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import ServeLimits, create_app, serve  # noqa: E402
from aiayn.serve.batcher import BatchConfig  # noqa: E402
from aiayn.tasks import load_pipeline  # noqa: E402
from serve_helpers import whole_response  # noqa: E402
from aiayn.serve.routes.translation import TranslateRequest  # noqa: E402

SENTENCE = "a b c d"


@pytest.fixture(scope="module")
def client(model_dir):
    with TestClient(create_app(model_dir, batching=BatchConfig(max_wait_ms=5),
                               limits=ServeLimits(max_chars=40, max_texts=4))) as c:
        yield c


def expected(model_dir, text=SENTENCE):
    from aiayn.decoding.translator import Translator

    return Translator.from_pretrained(model_dir).translate([text], method="greedy", max_len_a=0.0, max_len_b=6)[0]


def test_libretranslate_json_form_and_query(client, model_dir):
    want = expected(model_dir)
    as_json = client.post("/translate", json={"q": SENTENCE, "source": "de", "target": "en", "format": "text"})
    as_form = client.post("/translate", data={"q": SENTENCE, "source": "de", "target": "en", "api_key": "x"})
    as_query = client.post("/translate", params={"q": SENTENCE, "source": "de", "target": "en", "api_key": "x"})
    for response in (as_json, as_form, as_query):
        assert response.status_code == 200, response.text
        assert response.json() == {"translatedText": want}
    listed = client.post("/translate", json={"q": [SENTENCE, "c c"], "source": "de", "target": "en"})
    assert listed.json() == {"translatedText": [want, expected(model_dir, "c c")]}
    assert client.get("/languages").json() == [{"code": "de", "name": "de", "targets": ["en"]}]


def test_libretranslate_alternatives_are_the_beams_next_best(client, model_dir):
    """LibreTranslate's "alternatives": N -> the best of a beam of at least N + 1 as translatedText, and its next
    N as "alternatives" (a list per text for a list of texts), as the translator's n-best gives them."""
    from aiayn.decoding.translator import Translator

    nbest = Translator.from_pretrained(model_dir).translate([SENTENCE, "c c"], method="beam", beam_size=4, nbest=3,
                                                             max_len_a=0.0, max_len_b=6)
    one = client.post("/translate", json={"q": SENTENCE, "source": "de", "target": "en", "alternatives": 2}).json()
    assert one == {"translatedText": nbest[0][0][0], "alternatives": [t for t, _ in nbest[0][1:]]}
    both = client.post("/translate", data={"q": [SENTENCE, "c c"], "alternatives": "2"})
    assert both.json()["alternatives"] == [[t for t, _ in n[1:]] for n in nbest]
    for bad in (-1, 16, 1.5, "two"):
        response = client.post("/translate", json={"q": SENTENCE, "alternatives": bad})
        assert response.status_code == 422 and "alternatives must be a whole number from 0 to 15" in response.text


def test_native_api_with_scores_and_attention(client, model_dir):
    body = client.post("/v1/translate", json={"text": [SENTENCE], "beam_size": 2, "nbest": 2,
                                              "return_attention": True}).json()
    result = body["translations"][0]
    assert len(result["hypotheses"]) == 2 and result["text"] == result["hypotheses"][0]["text"]
    attention = result["attention"]
    weights = torch.tensor(attention["weights"])  # (L, H, T, S)
    assert weights.shape[:2] == (2, 2) and weights.shape[3] == len(attention["source"]) == 5  # 4 symbols + EOS
    assert weights.shape[2] == len(attention["target"])
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-3)
    for max_len_b in (3, 50):  # this model runs to the limit: no EOS row (the plot command is the reference)
        greedy = client.post("/v1/translate", json={"text": [SENTENCE], "method": "greedy", "max_len_b": max_len_b,
                                                    "return_attention": True}).json()
        result = greedy["translations"][0]
        assert result["hypotheses"] == [{"text": result["text"], "score": None}]
        want = load_pipeline(model_dir).attention(SENTENCE, max_len_b=max_len_b)  # task.json: max_len_a = 0
        got = result["attention"]
        assert got["source"] == want.src_labels and got["target"] == want.out_labels
        torch.testing.assert_close(torch.tensor(got["weights"]), torch.from_numpy(want.cross), atol=1e-4, rtol=0)


def test_native_api_hypotheses_are_the_translators_nbest(client, model_dir):
    """Each text's "hypotheses" is the translator's own n-best on the same settings: every text and
    every score (length-normalised log-probability), best first, and "text" the best one's."""
    from aiayn.decoding.translator import Translator

    texts = [SENTENCE, "c c"]
    nbest = Translator.from_pretrained(model_dir).translate(texts, method="beam", beam_size=3, nbest=3,
                                                             max_len_a=0.0, max_len_b=6)
    for hyps in nbest:  # the case can tell hypotheses apart: each has a text and a score of its own
        assert len({t for t, _ in hyps}) == len({s for _, s in hyps}) == 3, hyps
    body = client.post("/v1/translate", json={"text": texts, "beam_size": 3, "nbest": 3}).json()
    for got, want in zip(body["translations"], nbest, strict=True):
        assert [h["text"] for h in got["hypotheses"]] == [t for t, _ in want] and got["text"] == want[0][0]
        assert [h["score"] for h in got["hypotheses"]] == pytest.approx([s for _, s in want], abs=1e-5, rel=0)


def test_native_api_passes_no_repeat_ngram_size(client, model_dir):
    from aiayn.decoding.translator import Translator

    options = {"method": "beam", "beam_size": 3, "max_len_b": 12}
    translator = Translator.from_pretrained(model_dir)
    want = translator.translate([SENTENCE], max_len_a=0.0, no_repeat_ngram_size=2, **options)
    assert want != translator.translate([SENTENCE], max_len_a=0.0, **options)  # the option changes this output
    got = client.post("/v1/translate", json={"text": [SENTENCE], "no_repeat_ngram_size": 2, **options})
    assert got.status_code == 200 and got.json()["translations"][0]["text"] == want[0]


def test_native_api_keeps_the_models_decoding_settings_for_fields_left_out(client, model_dir):
    pipeline = load_pipeline(model_dir)  # task.json: greedy, at most 6 pieces (the API's old defaults: beam 4, 50)
    got = client.post("/v1/translate", json={"text": [SENTENCE]}).json()["translations"][0]
    assert got["text"] == pipeline.run([SENTENCE])[0] and len(got["text"].split()) <= 6
    for fields in ({"max_len_b": 3}, {"method": "beam", "beam_size": 2, "min_len": 4, "max_len_b": 5}):
        got = client.post("/v1/translate", json={"text": [SENTENCE], **fields}).json()["translations"][0]
        assert got["text"] == pipeline.run([SENTENCE], **fields)[0]
    # this random model runs to its limit, so min_len cannot show in an output: the options the route passes on
    given = TranslateRequest(text=[SENTENCE], min_len=4, beam_size=2).decode_options()
    assert given == {"beam_size": 2, "min_len": 4}
    decode, _ = pipeline.translator.settings(given)
    assert (decode.method, decode.beam_size, decode.min_len) == ("beam", 2, 4)  # a beam_size alone asks for beam search
    greedy = TranslateRequest(text=[SENTENCE], method="greedy", beam_size=2).decode_options()
    assert pipeline.translator.settings(greedy)[0].method == "greedy"
    refused = client.post("/v1/translate", json={"text": [SENTENCE], "min_len": -1})
    assert refused.status_code == 422 and "min_len must be" in refused.json()["error"]


@pytest.mark.parametrize("request_kwargs,status,message", [
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
    ({"json": {"q": 5, "source": "de", "target": "en"}}, 422, "q must be"),
    ({"json": {"q": "   ", "source": "de", "target": "en"}}, 422, "q is empty"),
    ({"json": {"q": "a " * 30}}, 413, "characters; at most 40"),
    ({"json": {"q": ["a"] * 5}}, 413, "at most 4"),
    ({"json": {"source": "de"}}, 422, "missing field q"),
    ({"json": {"q": "a", "source": "fr", "target": "en"}}, 400, "de -> en"),
    # input that crashed the server: a lone surrogate echoed in the error (a plain-text 500), an alternatives
    # field isdigit() took and int() refused, as JSON and as form text
    ({"content": b'{"q": "a", "source": "\\ud800"}', "headers": {"content-type": "application/json"}}, 400, "\\ud800"),
    ({"json": {"q": "a", "alternatives": "\u00b2"}}, 422, "alternatives must be a whole number"),
    ({"data": {"q": "a", "alternatives": "\u00b2"}}, 422, "alternatives must be a whole number"),
    ({"json": {"q": "a", "alternatives": "9" * 5000}}, 422, "alternatives must be a whole number"),
    ({"data": {"q": "a", "alternatives": "9" * 5000}}, 422, "alternatives must be a whole number"),
])
def test_bad_libretranslate_requests(client, request_kwargs, status, message):
    response = client.post("/translate", **request_kwargs)
    assert response.status_code == status and message in response.json()["error"]


@pytest.mark.parametrize("body,status,message", [
    ({"text": [SENTENCE], "beam_size": 10_000}, 422, "beam_size"),
    ({"text": [SENTENCE], "temperature": 0.5}, 422, "temperature"),  # not a whitelisted field
    ({"text": [SENTENCE], "no_repeat_ngram_size": -1}, 422, "no_repeat_ngram_size"),
    ({"text": []}, 422, "text"),
    ({"text": ["x" * 41]}, 413, "40"),
    ({"text": "not a list"}, 422, "text"),
])
def test_bad_native_requests(client, body, status, message):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == status and message in response.json()["error"]


def test_api_key_and_operations(model_dir):
    with TestClient(create_app(model_dir, limits=ServeLimits(api_key="secret"))) as c:
        assert c.post("/translate", json={"q": SENTENCE, "api_key": "wrong"}).status_code == 403
        assert c.post("/translate", json={"q": SENTENCE, "api_key": "secret"}).status_code == 200
        assert c.get("/health").json()["status"] == "ok"
        metrics = c.get("/v1/metrics").json()
        assert metrics["requests"] == 1 and metrics["queue_length"] == 0 and metrics["latency_ms"]["p50"] is not None
        page = c.get("/")
        assert page.status_code == 200 and "heatmap" in page.text and "http" not in page.text.split("<script>")[1]
        assert c.get("/openapi.json").status_code == 200
        # LibreTranslate's clients send api_key "" when they have none: it hid an Authorization header
        body = {"q": SENTENCE, "api_key": ""}
        assert c.post("/translate", json=body, headers={"Authorization": "Bearer secret"}).status_code == 200
        assert c.post("/translate", json=body).status_code == 403


def test_deep_translator_libretranslator_works_unchanged(model_dir, live_server):
    """A real LibreTranslate client over a real socket: it sends its fields as query parameters
    on a POST, always with an api_key, which a server without --api-key ignores."""
    pytest.importorskip("deep_translator", reason="the test extra installs deep-translator")
    from deep_translator import LibreTranslator

    url = live_server(create_app(model_dir))
    translator = LibreTranslator(source="de", target="en", api_key="anything", custom_url=f"{url}/")
    assert translator.translate(SENTENCE) == expected(model_dir)


def test_a_full_queue_is_a_503_with_retry_after_over_http(model_dir, live_server, monkeypatch):
    """`--max-queue`: a request that finds the queue full is answered at once, 503 with Retry-After, over a
    real socket. The worker is held by a gated decode, so one request is being decoded and one waits (the
    queue holds one); of the two sent meanwhile, whichever comes second is refused, and only it can be
    answered before the gate opens."""
    import concurrent.futures

    import httpx

    from aiayn.tasks.translation import TranslationPipeline

    run, started, release = TranslationPipeline.run, threading.Event(), threading.Event()

    def gated(self, items, **options):
        started.set()
        assert release.wait(60)
        return run(self, items, **options)

    monkeypatch.setattr(TranslationPipeline, "run", gated)  # the app decodes in this process (worker="thread")
    url = live_server(create_app(model_dir, batching=BatchConfig(worker="thread", max_batch=1, max_wait_ms=0,
                                                                 max_queue=1)))

    def post():
        return httpx.post(f"{url}/translate", json={"q": SENTENCE, "source": "de", "target": "en"}, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        decoding = pool.submit(post)
        assert started.wait(60)  # the worker holds the first request: the queue is empty
        others = [pool.submit(post), pool.submit(post)]
        done, _ = concurrent.futures.wait(others, timeout=60, return_when=concurrent.futures.FIRST_COMPLETED)
        release.set()
        assert done, "no request was refused"
        refused = done.pop().result()
        answered = [f.result() for f in [decoding, *others] if f.result() is not refused]
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert refused.json() == {"error": "server busy: 1 requests are waiting"}
    assert [(r.status_code, r.json()) for r in answered] == [(200, {"translatedText": expected(model_dir)})] * 2
    metrics = httpx.get(f"{url}/v1/metrics").json()
    assert metrics["rejected_queue_full"] == 1 and metrics["responses"] == {"2xx": 2, "5xx": 1}


def test_keep_alive_outlasts_a_request_and_the_clients_pool_expiry(model_dir, live_server, monkeypatch, caplog):
    """uvicorn can arm its keep-alive timer after a connection's next request has arrived, and the
    timer then cuts that request off: with its 5 s default, a request queued for 5 s was lost (a
    ReadError in an overflow run of benchmarks/serve_load.py). So the keep-alive must outlast the
    request timeout (`serve` warns otherwise), and it also outlasts the time httpx keeps an idle
    connection (5 s) before sending on it again: over one raw socket, a request, an idle pause past
    that, and a second request still answered."""
    import socket
    from urllib.parse import urlsplit

    httpx = pytest.importorskip("httpx")
    expiry = httpx.Limits().keepalive_expiry
    assert ServeLimits().keep_alive_s > max(expiry, BatchConfig().timeout_s)
    url = urlsplit(live_server(create_app(model_dir)))
    request = f"GET /health HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode()
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        for pause in (0.0, expiry + 0.5):
            time.sleep(pause)
            sock.sendall(request)
            answer = whole_response(sock)
            assert answer.startswith(b"HTTP/1.1 200"), f"after {pause} s idle: {answer[:80]!r}"
    with monkeypatch.context() as patch:
        patch.setattr("uvicorn.Server.run", lambda server: None)  # serve builds the app and its config, no more
        serve(model_dir, batching=BatchConfig(timeout_s=60), limits=ServeLimits(keep_alive_s=5))
    assert "not longer than the request timeout" in caplog.text


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan"), float("inf")])
def test_keep_alive_must_be_a_positive_number_of_seconds(seconds):
    with pytest.raises(ValueError, match="keep-alive must be a positive number of seconds"):
        ServeLimits(keep_alive_s=seconds)


def test_starlettes_own_errors_health_probes_and_content_types(client):
    assert client.get("/translate").json() == {"error": "Method Not Allowed"}  # was {"detail": ...}
    assert client.get("/no/such/route").status_code == 404 and "error" in client.get("/no/such/route").json()
    assert client.head("/health").status_code == 200  # a load balancer's HEAD probe was a 405
    for media in ("Application/JSON", "application/vnd.api+json", "application/json; charset=UTF-8"):
        response = client.post("/translate", content=b'{"q": "a b", "source": "de", "target": "en"}',
                               headers={"Content-Type": media})
        assert response.status_code == 200, (media, response.text)  # the body was ignored: "missing field q"


def test_cors_lets_the_named_origins_call_from_a_browser(model_dir):
    """A LibreTranslate client in a web page of another origin sends a preflight OPTIONS first: it was a 405,
    with no Access-Control-Allow-Origin on any answer. Off unless asked for."""
    origin = "https://example.org"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    body = {"q": "a b", "source": "de", "target": "en"}
    for origins, allowed in (((origin,), True), ((), False)):
        app = create_app(model_dir, batching=BatchConfig(worker="thread"), limits=ServeLimits(cors_origins=origins))
        with TestClient(app) as c:
            asked = c.options("/translate", headers=preflight)
            answered = c.post("/translate", json=body, headers={"Origin": origin})
        assert answered.status_code == 200
        assert (asked.status_code == 200) == allowed
        assert (answered.headers.get("access-control-allow-origin") == origin) == allowed
    with pytest.raises(ValueError, match="CORS origin"):
        ServeLimits(cors_origins=("",))


def test_a_decoder_option_applies_to_the_directories_that_take_it_and_names_the_others(task_dirs, caplog):
    """--quantize int8 on a server of a translation model and a language model refused to start: an LM has
    no quantize option. It now quantizes the translator alone, and says so."""
    dirs = [task_dirs["translation"], task_dirs["lm"]]
    with caplog.at_level("WARNING", logger="aiayn.serve.app"):
        app = create_app(dirs, batching=BatchConfig(worker="thread"), options={"quantize": "int8"})
    assert f"--quantize applies to {dirs[0]}; not to {dirs[1]}" in caplog.text
    with TestClient(app) as client:
        assert client.post("/v1/generate", json={"prompt": "a b", "method": "greedy"}).status_code == 200
        assert client.post("/translate", json={"q": "a b", "source": "de", "target": "en"}).status_code == 200
    translator = next(s for s in app.state.services if s.task == "translation").pipeline.translator
    assert translator.precision == "int8"


@pytest.mark.parametrize("body, field", [({"input": "a b", "pooling": "max"}, "pooling"), ({"input": 3}, "input"),
                                         ({"input": "a b", "dims": 8}, "unknown field(s) dims"),
                                         ({"input": "a b", "encoding_format": "base64"}, "encoding_format")])
def test_a_bad_embed_request_is_a_422_naming_its_field(task_dirs, body, field):
    with TestClient(create_app(task_dirs["embed"])) as client:
        response = client.post("/v1/embed", json=body)
    assert response.status_code == 422 and response.json()["error"].startswith(field), response.text


# -- /metrics counts the 4xx and 5xx answers -----------------------------------------
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
