"""`aiayn.serve.requests`, the body reader: bounded JSON (size, nesting, finite numbers within 64 bits),
form bodies, and error messages that never echo a megabyte of input."""

import json

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import ServeLimits, create_app  # noqa: E402
from serve_helpers import post_json  # noqa: E402


# -- numbers that are not finite, or not of the field's type ---------------------------
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


def test_an_integer_too_long_to_read_is_a_400(clients):
    body = b'{"text": ["a"], "max_len_b": 1' + b"0" * 5000 + b"}"
    response = post_json(clients["translation"], "/v1/translate", body)
    assert response.status_code == 400 and "malformed JSON body" in response.json()["error"]


# -- JSON nested deeper than any request needs ---------------------------------------
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


# -- an error never echoes the whole input -------------------------------------------
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
