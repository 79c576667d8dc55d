"""`benchmarks/serve_load.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench_helpers import BENCHMARKS


def test_serve_load_reads_batching_from_metrics_and_percentiles_from_latencies():
    import collections

    sys.path.insert(0, str(BENCHMARKS))
    from serve_load import mean_batch, summarize

    before = {"texts": 10, "batches": 5, "continuous_steps": 0, "continuous_texts_in_flight": 0}
    assert mean_batch(before, {**before, "texts": 40, "batches": 8}) == 10.0  # whole calls: 30 texts in 3
    assert mean_batch(before, {**before, "continuous_steps": 4, "continuous_texts_in_flight": 90}) == 22.5
    row = summarize([i / 1000 for i in range(1, 101)], collections.Counter({200: 100, 503: 2}), 2.0, 8)
    assert (row["ok"], row["errors"], row["sent_per_s"]) == (100, 2, 50.0)
    assert round(row["p50_ms"], 1) == 50.5 and round(row["p99_ms"], 2) == 99.01


def test_serve_load_overflow_runs_sum_the_answers_and_count_the_runs_with_other_errors(monkeypatch, tmp_path):
    import contextlib

    sys.path.insert(0, str(BENCHMARKS))
    import serve_load

    outcomes = iter([{"ok": 140, "error_kinds": {"503": 116}, "failures": []},
                     {"ok": 139, "error_kinds": {"503": 116, "ReadError": 1}, "failures": [("ReadError", 0.2, 5.1)]},
                     {"ok": 141, "error_kinds": {"503": 115}, "failures": []}])
    servers = []

    @contextlib.contextmanager
    def fake_server(model, *options, log):
        servers.append(options)  # a fresh server for each run, with the queue of 8
        yield "http://stub", 0

    monkeypatch.setattr(serve_load, "server", fake_server)
    monkeypatch.setattr(serve_load, "load", lambda url, sentences, clients: next(outcomes))
    total = serve_load.overflow_checks(Path("model"), ("--keep-alive", "5"), ["s"], 3, tmp_path)
    assert total == {"runs": 3, "ok": 420, "error_kinds": {"503": 347, "ReadError": 1}, "runs_with_other_errors": 1,
                     "failures": [("ReadError", 0.2, 5.1)]}
    assert servers == [("--keep-alive", "5", "--max-queue", "8")] * 3


def test_serve_load_wrk_client_sends_every_sentence_and_counts_errors():
    """wrk (Debian's package) with our Lua script against a stub server that answers 200, or 503
    for one sentence: every sentence is sent as a /v1/translate JSON body, and the summary line is read."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (setup.sh installs it as root: apt-get install wrk)")
    sys.path.insert(0, str(BENCHMARKS))
    from serve_load import load_wrk

    seen: list = []

    class Stub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802  (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body["text"][0]))
            status = 503 if body["text"][0] == "busy" else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        row = load_wrk(f"http://127.0.0.1:{server.server_address[1]}", ["ein Hund", "zwei Katzen", "busy"], 2, 1)
    finally:
        server.shutdown()
        server.server_close()
    assert {path for path, _ in seen} == {"/v1/translate"} and {t for _, t in seen} == {"ein Hund", "zwei Katzen", "busy"}
    busy = sum(t == "busy" for _, t in seen)  # wrk leaves out the answers in flight at its end: up to 2
    assert busy - 2 <= row["error_kinds"]["non-2xx"] <= busy and row["error_kinds"]["non-2xx"] > 0
    assert len(seen) - 2 <= row["ok"] + row["errors"] <= len(seen) and row["error_kinds"]["socket"] == 0
    assert row["sent_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_serve_load_counts_the_cpu_of_a_servers_descendants_apart_from_its_own():
    sys.path.insert(0, str(BENCHMARKS))
    from serve_load import cpu_seconds

    own, kids = cpu_seconds(os.getpid())
    grandchild = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'while True: pass']); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", grandchild], start_new_session=True)
    try:  # the grandchild spins, alive, as a server's decoder does: until it has used 0.4 s (at most 60 s)
        for _ in range(600):
            own_after, kids_after = cpu_seconds(os.getpid())
            if kids_after - kids > 0.4:
                break
            threading.Event().wait(0.1)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert kids_after - kids > 0.4  # the busy grandchild's time, reached through the child
    assert own_after - own < kids_after - kids  # this process only waited and read /proc
