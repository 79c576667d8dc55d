"""`aiayn serve` at SIGTERM with more queued work than its shutdown window: every accepted request is
answered, decoded (200) or refused as a JSON 503 with Retry-After; none gets uvicorn's bare 500."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from slow_task import NAME, SLOW_S  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

TIMEOUT_S, N = 2, 40  # the window: TIMEOUT_S + 5 s (serve.server.GRACE_MARGIN_S); the work: N * SLOW_S = 12 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_under_load_answers_every_accepted_request(tmp_path):
    directory = tiny_model(tmp_path / "m", "translation")
    info = json.loads((directory / "task.json").read_text())
    (directory / "task.json").write_text(json.dumps({**info, "task": NAME}))
    port, here = free_port(), Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parent / "tasks"), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "aiayn", "serve", str(directory), "--port", str(port), "--timeout",
                               str(TIMEOUT_S), "--max-batch", "1", "--worker", "thread"], env=env,
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

        def send() -> None:
            r = httpx.post(f"{url}/translate", json={"q": "a b c", "source": "de", "target": "en"}, timeout=60)
            answers.append((r.status_code, r.headers.get("content-type", ""), r.text, r.headers.get("retry-after")))

        clients = [threading.Thread(target=send) for _ in range(N)]
        for c in clients:
            c.start()
        time.sleep(1.0)  # every request in: a few decoded, the rest queued
        server.send_signal(signal.SIGTERM)
        for c in clients:
            c.join(60)
        assert server.wait(30) in (0, -signal.SIGTERM)  # uvicorn raises the signal again once it has shut down
    finally:
        if server.poll() is None:
            server.kill()
    assert len(answers) == N  # every request got an HTTP answer
    decoded = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] == 503]
    assert len(decoded) + len(refused) == N, sorted({a[0] for a in answers})
    assert decoded and refused  # some work was done, and more was left than the window held
    for status, kind, body, retry in refused:
        assert kind.startswith("application/json") and "shutting down" in json.loads(body)["error"] and retry
