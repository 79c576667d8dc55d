"""How `aiayn serve` runs an app with uvicorn: graceful shutdown, keep-alive, a bound on receiving
each request (slow clients), and no api key in the access log."""

import logging
import threading
from typing import Callable

from aiayn.serve.batcher import DRAIN_EXTRA_S, BatchConfig
from aiayn.serve.limits import ServeLimits

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether `host` binds this machine's loopback interface only ("localhost", 127.x.x.x, ::1)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost
        return False


GRACE_MARGIN_S = DRAIN_EXTRA_S + 2.0  # the shutdown window beyond the request timeout: every answer goes out in it


def uvicorn_config(app, host: str, port: int, limits: ServeLimits = ServeLimits(), log_level: str = "info",
                   http: str = "auto", timeout_s: float = BatchConfig.timeout_s):
    """How `serve` runs `app` with uvicorn: on shutdown, `timeout_s` (the request timeout, `--timeout`) and
    `GRACE_MARGIN_S` more for the requests accepted, each of which is answered within `timeout_s` and
    `batcher.DRAIN_EXTRA_S` (`DynamicBatcher.drain`); idle connections kept `limits.keep_alive_s`, a request received whole within
    `limits.receive_timeout_s` (`http`: uvicorn's HTTP implementation under that bound, "auto", "httptools"
    or "h11"), and no api key in the access log."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=timeout_s + GRACE_MARGIN_S,
                            timeout_keep_alive=limits.keep_alive_s,  # it sets up uvicorn's loggers
                            http=receive_bounded(http, limits.receive_timeout_s))
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactApiKey) for f in access.filters):
        access.addFilter(RedactApiKey())
    return config


def draining_server(config, drain: Callable[[], None]):
    """A uvicorn server that calls `drain()` (the batchers' `drain`: nothing more taken, and a queued request
    that its timeout runs out on answered 503) as shutdown begins, at SIGTERM or SIGINT, before uvicorn's
    graceful wait: without it, requests still queued when that wait ended got uvicorn's bare 500."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            if not self.should_exit:  # in a thread: a signal handler must not wait for the batchers' locks
                threading.Thread(target=drain, name="aiayn-drain", daemon=True).start()
            super().handle_exit(sig, frame)

    return DrainingServer(config)


class RedactApiKey(logging.Filter):
    """uvicorn's access log writes each request's path with its query string, where a LibreTranslate
    client sends its `api_key`: the key's value becomes "***" in those lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_api_key(a) if isinstance(a, str) and "?" in a else a for a in record.args)
        return True


def redact_api_key(path: str) -> str:
    """`path` with the value of every `api_key` query parameter (however its name is escaped) replaced by ***."""
    from urllib.parse import unquote_plus

    head, _, query = path.partition("?")
    parts = [name + "=***" if unquote_plus(name) == "api_key" else f"{name}{eq}{value}"
             for name, eq, value in (part.partition("=") for part in query.split("&"))]
    return f"{head}?{'&'.join(parts)}"


# -- slow clients ------------------------------------------------------------------------------
class _ReceiveDeadline:
    """Mixed into a uvicorn HTTP protocol: a connection is closed when a request has not arrived
    whole `receive_s` seconds after its first byte (after the connection opened, for the first).
    The deadline covers receiving only: it is cancelled once the request is complete, so neither
    a long decode nor an idle keep-alive connection (uvicorn's own timer) meets it."""

    receive_s: float
    _deadline = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is held no longer than one that sends half

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.receive_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.warning("%s: no whole request within %g s; connection closed", self.client, self.receive_s)
            self.transport.close()


def receive_bounded(http: str, receive_s: float) -> type:
    """uvicorn's HTTP protocol class `http` ("auto": httptools where installed, else h11) with the
    receive deadline of `_ReceiveDeadline`, told where a request begins and ends by its parser."""
    import importlib.util

    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class Protocol(_ReceiveDeadline, HttpToolsProtocol):
            def on_message_begin(self) -> None:  # the parser saw the request's first byte
                self._arm()
                super().on_message_begin()

            def on_message_complete(self) -> None:  # ... and its last
                super().on_message_complete()
                self._disarm()
    elif http == "h11":
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol

        class Protocol(_ReceiveDeadline, H11Protocol):
            def data_received(self, data: bytes) -> None:
                self._arm()
                super().data_received(data)
                state, buffered = self.conn.their_state, self.conn.trailing_data[0]
                if not (state is h11.SEND_BODY or (state is h11.IDLE and buffered)):  # buffered: part of the headers
                    self._disarm()
    else:
        raise ValueError(f"unknown HTTP implementation {http!r}; choose from auto, httptools, h11")
    Protocol.receive_s = receive_s
    return Protocol
