"""`aiayn.serve.metrics`: /metrics in Prometheus' text format, read by prometheus_client's own parser."""

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the test extra)")

from fastapi.testclient import TestClient  # noqa: E402

from aiayn.serve.app import BatchConfig, create_app  # noqa: E402

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
