"""Fixtures shared by the serve tests: a tiny model directory and a real server on a local socket."""

import dataclasses
import json
import socket
import threading
import time

import pytest
import torch

from aiayn.config import DecodeConfig, TransformerConfig
from aiayn.data.synthetic import symbols
from aiayn.data.tokenizer import SymbolTokenizer, TokenizerPair, save_tokenizers
from aiayn.models import Transformer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random translation model directory announcing the pair de -> en (greedy, at most 6 pieces)."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("model")
    Transformer(TransformerConfig.preset("tiny", src_vocab_size=14)).save_pretrained(directory)
    save_tokenizers(TokenizerPair.shared(SymbolTokenizer(symbols(10))), directory)
    decode = dataclasses.asdict(DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=6))
    (directory / "task.json").write_text(json.dumps({"task": "translation", "languages": ["de", "en"],
                                                     "decode": decode}))
    return directory


@pytest.fixture(scope="module")
def live_server():
    """`start(app, **config) -> base URL`: serves `app` with uvicorn in a thread, on a socket bound before the
    thread starts (no race for a free port); every server started stops when the module ends."""
    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")
    from aiayn.serve.server import uvicorn_config
    running = []

    def start(app, **config) -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = {"log_level": "warning", **config}  # uvicorn_config's keywords: limits, log_level
        server = uvicorn.Server(uvicorn_config(app, *sock.getsockname(), **config))  # as `aiayn serve` runs
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread, sock))
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(10)
        sock.close()


# One tiny random model directory per task with an HTTP route.
from tiny_models import TASKS, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def task_dirs(tmp_path_factory) -> dict:
    """task -> a tiny model directory of that task, for every task in `TASKS`."""
    root = tmp_path_factory.mktemp("tasks")
    return {task: tiny_model(root / task, task) for task in TASKS}


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium driven by Playwright (as in test_browser.py), or a skip saying what is missing."""
    import os
    import shutil

    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="Playwright is not installed: pip install -e '.[test]'")
    executable = os.environ.get("AIAYN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        pytest.skip("Chromium not found: apt-get install chromium, or point AIAYN_CHROMIUM at a Chromium binary")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def clients(task_dirs):
    """task -> a TestClient of a server on that task's tiny model; 500s come back as responses."""
    from tiny_models import task_clients

    with task_clients(task_dirs, raise_server_exceptions=False) as opened:
        yield opened
