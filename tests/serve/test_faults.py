"""Faults (issue 30): a client that disconnects, or a request that times out, inside a running
continuous search leaves it within a step; a decoder process killed under load answers its
requests 503 and the next request is answered; SIGTERM under load answers every accepted request.

No assertion here is about durations: the requests ask for 20,000 tokens, which a search that
failed to drop them would be far from done with, and each wait is for an event seen in
/v1/metrics (with a bound only so that a failure fails instead of hanging)."""

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="the test extra installs httpx")

from aiayn.serve.app import BatchConfig, ServeLimits, create_app  # noqa: E402
from slow_task import NAME as SLOW_TASK  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

LONG = 20_000  # tokens a request asks for: this random model never ends a text before its limit
LIMITS = ServeLimits(max_len_b=LONG)
BEAM = {"text": ["a b c d"], "beam_size": 2, "max_len_b": LONG}


def wait_for(url: str, condition, what: str, bound_s: float = 60.0) -> dict:
    """/v1/metrics once `condition(metrics)` holds; fails after `bound_s` (a hang guard, not a measurement)."""
    deadline = time.monotonic() + bound_s
    while True:
        metrics = httpx.get(f"{url}/v1/metrics", timeout=10).json()
        if condition(metrics):
            return metrics
        assert time.monotonic() < deadline, f"never: {what}; last {metrics}"
        time.sleep(0.05)


def raw_post(url: str, path: str, body: bytes) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (path.encode(), len(body), body))
    return sock


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_a_client_that_disconnects_leaves_the_running_search(model_dir, live_server, worker):
    """In both workers; the thread's search is a coroutine's task, whose cancellation lands later
    than a future's: the answer is still a 499, never a 500 (the response counts say which)."""
    import json

    url = live_server(create_app(model_dir, batching=BatchConfig(worker=worker), limits=LIMITS))
    sock = raw_post(url, "/v1/translate", json.dumps(BEAM).encode())
    started = wait_for(url, lambda m: m["texts_in_flight"] == 1 and m["continuous_steps"] > 0, "in the search")
    sock.close()
    fours = started["responses"].get("4xx", 0)
    after = wait_for(url, lambda m: m["cancelled_texts"]["disconnect"] == 1 and m["texts_in_flight"] == 0
                     and m["responses"].get("4xx", 0) > fours, "the text dropped and answered")
    assert after["continuous_steps"] < LONG // 2  # it left long before its end
    time.sleep(0.2)
    assert httpx.get(f"{url}/v1/metrics").json()["continuous_steps"] == after["continuous_steps"]  # no step since
    assert started["cancelled_texts"]["disconnect"] == 0
    assert after["responses"]["4xx"] == fours + 1 and "5xx" not in after["responses"]  # a 499, no 500
    answered = httpx.post(f"{url}/v1/translate", json={"text": ["a b"], "beam_size": 2, "max_len_b": 4}, timeout=30)
    assert answered.status_code == 200  # the search goes on serving


def test_a_timed_out_request_leaves_the_running_search(model_dir):
    from fastapi.testclient import TestClient

    app = create_app(model_dir, batching=BatchConfig(timeout_s=0.5, worker="thread"), limits=LIMITS)
    with TestClient(app) as client:
        response = client.post("/v1/translate", json=BEAM)
        assert response.status_code == 504
        deadline = time.monotonic() + 60
        while (m := client.get("/v1/metrics").json())["texts_in_flight"]:
            assert time.monotonic() < deadline, m
            time.sleep(0.05)
        assert m["cancelled_texts"] == {"timeout": 1, "disconnect": 0} and m["timeouts"] == 1
        assert 0 < m["continuous_steps"] < LONG // 2


def test_a_killed_worker_answers_503_and_the_next_request_is_served(model_dir, live_server):
    service_app = create_app(model_dir, batching=BatchConfig(max_batch=8), limits=LIMITS)
    url = live_server(service_app)
    pid = service_app.state.service.worker.pid
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(httpx.post, f"{url}/v1/translate", json=BEAM, timeout=60) for _ in range(4)]
        wait_for(url, lambda m: m["texts_in_flight"] == 4, "four texts in the search")
        os.kill(pid, signal.SIGKILL)
        answers = [f.result() for f in futures]
    assert [a.status_code for a in answers] == [503] * 4, [a.text for a in answers]
    assert all(a.headers["Retry-After"] == "1" for a in answers)
    nxt = httpx.post(f"{url}/v1/translate", json={"text": ["a b"], "beam_size": 2, "max_len_b": 4}, timeout=60)
    assert nxt.status_code == 200
    metrics = httpx.get(f"{url}/v1/metrics").json()
    assert metrics["worker_restarts"] == 1 and metrics["worker_pid"] not in (None, pid) and metrics["unavailable"] == 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("group", [False, True])
def test_sigterm_under_load_answers_every_accepted_request(model_dir, group):
    """To the server alone, or to its whole process group (systemd's KillMode=control-group, kill -TERM
    -PGID), which ends the decoder's fork server too: that must not read as the decoder's death."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", str(model_dir), "--port", str(port),
                               "--max-batch", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=group)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        body = {"text": ["a b c d"], "beam_size": 2, "max_len_b": 256}  # the CLI's bound on max_len_b
        n = 6
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(httpx.post, f"{url}/v1/translate", json=body, timeout=120) for _ in range(n)]
            wait_for(url, lambda m: m["requests"] + m["queue_length"] + m["texts_in_flight"] >= n,
                     "every request accepted")  # 2 in flight, the rest queued (or done)
            os.killpg(server.pid, signal.SIGTERM) if group else server.send_signal(signal.SIGTERM)
            answers = [f.result() for f in futures]
        assert [a.status_code for a in answers] == [200] * n
        assert server.wait(60) in (0, -signal.SIGTERM)  # uvicorn ends by re-raising the signal it drained on
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_decoder_that_cannot_start_is_a_503_not_a_timeout(model_dir, live_server, tmp_path):
    """Its model files gone from under the server, a restart fails: the request asking for it is answered
    503 at once (it was retried in a loop, a new process each time, until it timed out: 504)."""
    import shutil

    directory = shutil.copytree(model_dir, tmp_path / "model")
    service_app = create_app(directory, batching=BatchConfig(max_batch=8, timeout_s=30), limits=LIMITS)
    url = live_server(service_app)
    os.kill(service_app.state.service.worker.pid, signal.SIGKILL)
    (directory / "model.safetensors").rename(directory / "aside")
    body = {"text": ["a b"], "beam_size": 2, "max_len_b": 4}
    answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60)
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", answer.text
    assert httpx.get(f"{url}/v1/metrics").json()["worker_restarts"] == 1  # one try, not a loop
    health = httpx.get(f"{url}/health")  # a load balancer sends elsewhere meanwhile ("ok" before)
    assert health.status_code == 503 and health.json()["status"] == "unavailable"
    (directory / "aside").rename(directory / "model.safetensors")
    assert httpx.post(f"{url}/v1/translate", json=body, timeout=60).status_code == 200  # the next one tries again
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


SLOW_N, SLOW_TIMEOUT_S = 50, 5


def test_sigterm_with_more_queued_work_than_the_window_answers_200_or_a_json_503(tmp_path):
    """--timeout 5 (the window: 5 + 5 s) and 50 requests of 0.3 s each (15 s of work): every accepted request is
    decoded or answered 503 with Retry-After when its timeout runs out in the queue; none gets a bare 500."""
    directory = tiny_model(tmp_path / "m", "translation")
    info = json.loads((directory / "task.json").read_text())
    (directory / "task.json").write_text(json.dumps({**info, "task": SLOW_TASK}))
    port, here = free_port(), Path(__file__).parent  # slow_task.py and tiny_models.py
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent / "tasks"), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", str(directory), "--port", str(port), "--timeout",
                               str(SLOW_TIMEOUT_S), "--max-batch", "1"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.2)
        answers = []
        client = httpx.Client(limits=httpx.Limits(max_connections=SLOW_N), timeout=60)

        def send() -> None:
            r = client.post(f"{url}/translate", json={"q": "a b c", "source": "de", "target": "en"})
            answers.append((r.status_code, r.headers.get("content-type", ""), r.text, r.headers.get("retry-after")))

        clients = [threading.Thread(target=send) for _ in range(SLOW_N)]
        for c in clients:
            c.start()
        wait_for(url, lambda m: m["requests"] + m["queue_length"] >= SLOW_N - 1,  # --max-batch 1: one decoding
                 "every request accepted")  # a few decoded, the rest queued
        server.send_signal(signal.SIGTERM)
        for c in clients:
            c.join(60)
        client.close()
        assert server.wait(30) in (0, -signal.SIGTERM)  # uvicorn raises the signal again once it has shut down
    finally:
        if server.poll() is None:
            server.kill()
    assert len(answers) == SLOW_N  # every request got an HTTP answer
    decoded = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] == 503]
    assert len(decoded) + len(refused) == SLOW_N, [a for a in answers if a[0] not in (200, 503)]
    assert decoded and refused  # some work was done, and more was left than the window held
    for status, kind, body, retry in refused:
        assert kind.startswith("application/json") and "shutting down" in json.loads(body)["error"] and retry
