"""`serve.keys.KeyRing` on a clock the test sets: the per-minute window slides (what left it no longer
counts), a 429's Retry-After is the exact wait until there is room, and one request over a key's
whole allowance of characters is a 413 (waiting would never let it through)."""

import types

import pytest

from aiayn.serve import keys
from aiayn.serve.keys import WINDOW_S, KeyLimits, KeyRing
from aiayn.serve.requests import HTTPProblem
import json

from aiayn.serve.app import create_app
from aiayn.serve.batcher import BatchConfig
from aiayn.serve.keys import read_api_keys
from aiayn.serve.limits import ServeLimits

BODY = {"q": "a b c", "source": "de", "target": "en"}


@pytest.fixture
def clock(monkeypatch):
    """The time KeyRing reads (`time.monotonic` in serve.keys only): `clock.now`, seconds, set by the test."""
    clock = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(keys, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    return clock


def refusal(ring: KeyRing, key: str, q: str) -> HTTPProblem:
    with pytest.raises(HTTPProblem) as refused:
        ring.check(key, {"q": q, "api_key": key})
    return refused.value


def test_the_request_window_slides(clock):
    assert WINDOW_S == 60.0  # the times below are chosen against a minute
    ring = KeyRing({"k": KeyLimits(requests_per_minute=3)})
    for clock.now in (1000.0, 1010.0, 1020.0):
        ring.check("k", {"q": "a"})
    clock.now = 1030.0
    over = refusal(ring, "k", "a")  # the request of 1000 s leaves the window at 1060 s
    assert (over.status, over.message, over.headers) == (429, "over this key's 3 requests per minute",
                                                         {"Retry-After": "30"})
    clock.now = 1060.0  # the first request has left the window: room for one
    ring.check("k", {"q": "a"})
    clock.now = 1061.0  # in the window now: 1010, 1020, 1060; the next room comes at 1070
    over = refusal(ring, "k", "a")
    assert (over.status, over.headers) == (429, {"Retry-After": "9"})
    assert ring.refused == {"429": 2}


def test_the_character_window_slides_and_one_request_over_the_whole_allowance_is_a_413(clock):
    ring = KeyRing({"k": KeyLimits(chars_per_minute=10)})
    too_long = refusal(ring, "k", "x" * 11)
    assert (too_long.status, too_long.message) == (413, "11 characters in one request; this key may send 10 a minute")
    ring.check("k", {"q": "x" * 6, "api_key": "k"})  # 6 of 10: the key itself is not counted, nor was the 413
    clock.now = 1020.0
    ring.check("k", {"q": ["xx", "xx"]})  # 10 of 10 (a list's texts count)
    clock.now = 1030.0
    over = refusal(ring, "k", "xxx")  # 3 over: the 6 of 1000 s must leave, at 1060 s
    assert (over.status, over.message, over.headers) == (429, "over this key's 10 characters per minute",
                                                         {"Retry-After": "30"})
    clock.now = 1060.0  # the 6 have left the window: 4 + 3 fit
    ring.check("k", {"q": "xxx"})
    clock.now = 1061.0
    assert refusal(ring, "k", "x" * 11).status == 413  # over the allowance: a 413, not a 429 to wait out
    assert ring.refused == {"429": 1}


@pytest.mark.parametrize("text, message", [
    ('{"k": {"rpm": 5}}', r"key 1: unknown limit 'rpm'; known: chars_per_minute, requests_per_minute"),
    ('{"k": {"request_per_minute": 5}}', r"unknown limit 'request_per_minute' \(did you mean requests_per_minute\?\)"),
])
def test_a_key_file_with_an_unknown_limit_names_it_and_the_known_ones(tmp_path, text, message):
    path = tmp_path / "keys.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        keys.read_api_keys(path)


def test_a_key_file_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "keys.json"
    path.write_bytes(b"\xef\xbb\xbf" + '{"k\u00e9": {"requests_per_minute": 5}}'.encode())
    assert keys.read_api_keys(path) == {"k\u00e9": KeyLimits(requests_per_minute=5)}


def test_a_utf8_key_as_a_bearer_token_is_the_key_it_is_in_a_body():
    """HTTP headers arrive as bytes that the server reads as Latin-1; a body's JSON carries the key as text."""
    header = "Bearer clé".encode("utf-8").decode("latin-1")  # what Starlette hands over for the UTF-8 bytes
    request = types.SimpleNamespace(headers={"authorization": header})
    assert keys.given_key(request, {}) == "clé"


def test_keys_with_limits_per_key(model_dir, tmp_path):
    TestClient = pytest.importorskip("fastapi.testclient", reason="the serve extra is not installed").TestClient
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"slow": {"requests_per_minute": 2}, "short": {"chars_per_minute": 12}, "free": {}}))
    keys = read_api_keys(path)
    assert keys == {"slow": KeyLimits(requests_per_minute=2), "short": KeyLimits(chars_per_minute=12),
                    "free": KeyLimits()}
    limits = ServeLimits(api_keys=tuple(keys.items()))
    with TestClient(create_app(model_dir, batching=BatchConfig(worker="thread"), limits=limits)) as client:
        post = lambda key, **body: client.post("/translate", json={**BODY, **body, "api_key": key})  # noqa: E731
        assert post("wrong").status_code == 403
        assert client.post("/translate", json=BODY).status_code == 403  # no key
        assert [post("slow").status_code for _ in range(2)] == [200, 200]
        over = post("slow")
        assert over.status_code == 429 and "2 requests per minute" in over.json()["error"]
        assert 1 <= int(over.headers["Retry-After"]) <= 60
        assert post("free").status_code == 200  # another key's budget is its own
        headers = {"Authorization": "Bearer short"}
        bad = client.post("/translate", json={**BODY, "q": "a b c d e f", "alternatives": -1}, headers=headers)
        assert bad.status_code == 422  # refused for its input: its 11 characters are not charged
        assert client.post("/translate", json={**BODY, "q": "a b c d"}, headers=headers).status_code == 200  # 7 chars
        assert client.post("/translate", json={**BODY, "q": "a b c"}, headers=headers).status_code == 200  # 5: 12
        over = client.post("/translate", json={**BODY, "q": "a"}, headers=headers)  # the texts alone count, not de, en
        assert over.status_code == 429 and "characters per minute" in over.json()["error"]
        assert "Retry-After" in over.headers
        assert client.get("/languages").status_code == 200  # runs no model: no key needed
        refused = client.get("/v1/metrics").json()["refused"]
    assert refused == {"403": 2, "429": 2}


@pytest.mark.parametrize("content,message", [("{}", "at least one key"), ('{"k": {"requests_per_minute": 0}}', "key 1"),
                                             ('{"k": {"per_hour": 5}}', "key 1"), ("[", "cannot read"),
                                             ('{"k": {}, "k": {"requests_per_minute": 9}}', "'k' named more than once")])
def test_a_bad_keys_file_is_refused_with_where(tmp_path, content, message):
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_api_keys(path)
