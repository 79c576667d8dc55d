"""Download tests against a local threaded HTTP server serving ../shared/data/multi30k."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from aiayn.data import registry
from aiayn.data.registry import DownloadError, resolve_files


class Handler(http.server.SimpleHTTPRequestHandler):
    """/good/X serves X; /corrupt/X serves X with one byte flipped; /drop/X sends the headers
    and half the body, then closes; /flaky/X drops the first request for X, then serves it."""

    flaky_seen: set[str] = set()
    lock = threading.Lock()

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        _, mode, name = self.path.split("/", 2)
        body = (Path(self.directory) / name).read_bytes() if (Path(self.directory) / name).is_file() else None
        if body is None or mode not in ("good", "corrupt", "drop", "flaky"):
            self.send_error(404)
            return
        if mode == "flaky":
            with self.lock:
                mode = "good" if name in self.flaky_seen else "drop"
                self.flaky_seen.add(name)
        if mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if mode == "drop" else body)
        self.close_connection = True


@pytest.fixture(scope="module")
def server(multi30k_dir):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(multi30k_dir)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def no_env_data_dir(monkeypatch):
    monkeypatch.delenv("AIAYN_DATA_DIR", raising=False)


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.is_file())


def test_registry_checksums_match_shared_copy(multi30k_dir):
    for name, digest in registry.MULTI30K.sha256.items():
        assert hashlib.sha256((multi30k_dir / name).read_bytes()).hexdigest() == digest


def test_good_download_verified_and_cached(server, tmp_path, multi30k_dir):
    paths = resolve_files("multi30k", "val", ["en", "de"], cache_dir=tmp_path, base_url=f"{server}/good")
    assert [p.name for p in paths] == ["val.en.gz", "val.de.gz"]
    assert paths[0].read_bytes() == (multi30k_dir / "val.en.gz").read_bytes()
    assert _leftovers(tmp_path) == ["val.de.gz", "val.en.gz"]
    # second resolve uses the cache: an unreachable URL is never contacted
    again = resolve_files("multi30k", "val", ["en"], cache_dir=tmp_path, base_url="http://127.0.0.1:9/none")
    assert again[0] == paths[0]


def test_corrupt_download_rejected_and_not_cached(server, tmp_path):
    with pytest.raises(DownloadError, match=r"val\.en\.gz is corrupt: sha256"):
        resolve_files("multi30k", "val", ["en"], cache_dir=tmp_path, base_url=f"{server}/corrupt")
    assert _leftovers(tmp_path) == []


def test_interrupted_download_fails_clearly_after_retries(server, tmp_path):
    with pytest.raises(DownloadError, match=r"val\.en\.gz failed after 3 attempts: .*pass it as data\.data_dir"):
        resolve_files("multi30k", "val", ["en"], cache_dir=tmp_path, base_url=f"{server}/drop",
                      retries=2, backoff_s=0.01)
    assert _leftovers(tmp_path) == []


def test_interrupted_download_is_retried(server, tmp_path):
    paths = resolve_files("multi30k", "test_2016_flickr", ["fr"], cache_dir=tmp_path, base_url=f"{server}/flaky",
                          retries=2, backoff_s=0.01)
    assert registry.sha256_file(paths[0]) == registry.MULTI30K.sha256["test_2016_flickr.fr.gz"]


def test_http_error_not_retried(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        resolve_files("multi30k", "val", ["en"], cache_dir=tmp_path, base_url=f"{server}/missing")


def test_corrupted_cache_entry_is_replaced(server, tmp_path):
    (path,) = resolve_files("multi30k", "val", ["cs"], cache_dir=tmp_path, base_url=f"{server}/good")
    path.write_bytes(b"garbage")
    (again,) = resolve_files("multi30k", "val", ["cs"], cache_dir=tmp_path, base_url=f"{server}/good")
    assert registry.sha256_file(again) == registry.MULTI30K.sha256["val.cs.gz"]


def test_local_dirs_take_precedence(multi30k_dir, tmp_path, monkeypatch):
    no_url = "http://127.0.0.1:9/none"
    assert resolve_files("multi30k", "val", ["en"], data_dir=multi30k_dir, base_url=no_url) == [multi30k_dir / "val.en.gz"]
    # AIAYN_DATA_DIR may hold a directory per corpus
    (tmp_path / "multi30k").symlink_to(multi30k_dir)
    monkeypatch.setenv("AIAYN_DATA_DIR", str(tmp_path))
    (p,) = resolve_files("multi30k", "train", ["de"], cache_dir=tmp_path / "c", base_url=no_url)
    assert p == tmp_path / "multi30k" / "train.de.gz"
    with pytest.raises(FileNotFoundError, match="no val.en"):
        resolve_files("multi30k", "val", ["en"], data_dir=tmp_path / "empty")


def test_unknown_names():
    with pytest.raises(ValueError, match="unknown corpus"):
        resolve_files("wmt99", "train", ["en"])
    with pytest.raises(ValueError, match="no split 'dev'"):
        resolve_files("multi30k", "dev", ["en"])
    with pytest.raises(ValueError, match="no language 'ja'"):
        resolve_files("multi30k", "train", ["ja"])
