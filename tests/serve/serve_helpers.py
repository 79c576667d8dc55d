"""What several of the serve tests send and read."""

import socket
import time
from urllib.parse import urlsplit

from aiayn.serve.limits import ServeLimits


def post_json(client, path: str, body: bytes):
    """A request whose JSON body is given as bytes (as a client that writes its own JSON sends it)."""
    return client.post(path, content=body, headers={"content-type": "application/json"})


LONG = 20_000  # tokens a request asks for: this random model never ends a text before its limit
LIMITS = ServeLimits(max_len_b=LONG)
BEAM = {"text": ["a b c d"], "beam_size": 2, "max_len_b": LONG}


def wait_for(url: str, condition, what: str, bound_s: float = 60.0) -> dict:
    """/v1/metrics once `condition(metrics)` holds; fails after `bound_s` (a hang guard, not a measurement)."""
    import httpx  # the test extra's; only the tests that start a server call this

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


def whole_response(sock) -> bytes:
    """One HTTP response read whole (its headers and its Content-Length of body may come in separate packets)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:  # closed by the server: what came
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next((line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), b"0"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body
