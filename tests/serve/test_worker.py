"""`serve.worker`: the decoder process of a model directory."""

from pathlib import Path

import pytest

pytest.importorskip("setproctitle", reason="the serve extra installs setproctitle")

from aiayn.serve.worker import WorkerProcess  # noqa: E402
from tiny_models import tiny_model  # noqa: E402
import concurrent.futures
import os
import signal
from aiayn.serve.app import create_app  # noqa: E402
from aiayn.serve.batcher import BatchConfig  # noqa: E402
from serve_helpers import BEAM, LIMITS, wait_for  # noqa: E402


def test_each_decoder_process_is_named_by_its_model_directory(tmp_path):
    """The forkserver's children all carried its command line: only /v1/metrics' worker_pid told them apart."""
    workers = [WorkerProcess(tiny_model(tmp_path / task, task), "cpu") for task in ("translation", "lm")]
    try:  # each has answered "ready" once its pipeline loaded, after it named itself
        names = [Path(f"/proc/{w.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip() for w in workers]
    finally:
        for w in workers:
            w.close()
    assert names == [f"aiayn decoder {tmp_path / 'translation'}", f"aiayn decoder {tmp_path / 'lm'}"]


def test_a_killed_worker_answers_503_and_the_next_request_is_served(model_dir, live_server):
    httpx = pytest.importorskip("httpx", reason="the test extra installs httpx")
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


def test_a_decoder_that_cannot_start_is_a_503_not_a_timeout(model_dir, live_server, tmp_path):
    """Its model files gone from under the server, a restart fails: the request asking for it is answered
    503 at once (it was retried in a loop, a new process each time, until it timed out: 504)."""
    httpx = pytest.importorskip("httpx", reason="the test extra installs httpx")
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
