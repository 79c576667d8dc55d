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
    """`start(app) -> base URL`: serves `app` with uvicorn in a thread, on a socket bound before the
    thread starts (no race for a free port); every server started stops when the module ends."""
    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")
    from aiayn.serve.app import uvicorn_config
    running = []

    def start(app) -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn_config(app, *sock.getsockname(), log_level="warning"))  # as `aiayn serve` runs
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
