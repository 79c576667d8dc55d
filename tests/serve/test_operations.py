"""Operations (issue 30): /metrics in Prometheus' text format read by prometheus_client's own
parser, the JSON kept at /v1/metrics, and api keys with limits per key (403, 429 with Retry-After)."""

import json

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import BatchConfig, KeyLimits, ServeLimits, create_app  # noqa: E402
from aiayn.serve.keys import read_api_keys  # noqa: E402

BODY = {"q": "a b c", "source": "de", "target": "en"}


def test_prometheus_parser_reads_metrics(model_dir):
    from prometheus_client.parser import text_string_to_metric_families

    with TestClient(create_app(model_dir, batching=BatchConfig(worker="thread"))) as client:
        for _ in range(3):
            assert client.post("/translate", json=BODY).status_code == 200
        assert client.post("/translate", json={"q": ""}).status_code == 422
        response = client.get("/metrics")
        assert response.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        assert client.get("/v1/metrics").json()["requests"] == 3  # the JSON, as before
    samples = lambda name: {tuple(sorted(s.labels.items())): s.value for s in families[name].samples  # noqa: E731
                            if s.name.endswith("_total") or families[name].type == "gauge"}
    assert samples("aiayn_requests") == {(("model", str(model_dir)),): 3.0}
    assert samples("aiayn_responses") == {(("status", "2xx"),): 3.0, (("status", "4xx"),): 1.0}
    assert samples("aiayn_cancelled_texts") == {(("model", str(model_dir)), ("reason", r)): 0.0
                                                for r in ("timeout", "disconnect")}
    assert samples("aiayn_queue_length") == {(("model", str(model_dir)),): 0.0}
    assert families["aiayn_latency_seconds"].type == "gauge" and families["aiayn_requests"].type == "counter"


def test_keys_with_limits_per_key(model_dir, tmp_path):
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
