"""`aiayn serve`: a model directory behind HTTP (FastAPI), batched across requests.

The routes are the model's: `aiayn.tasks.load_pipeline` reads the directory's task.json and its
pipeline lists them (`Pipeline.routes`), e.g. for a translation model LibreTranslate's
POST /translate and GET /languages, and POST /v1/translate; /v1/summarize, /v1/answer,
/v1/generate or /v1/classify for the other tasks. Every server adds GET /health, GET /metrics (the
batcher's counters and the responses per status class), GET /docs (FastAPI's OpenAPI page) and
GET / (the web page). This module names no task: a request's fields reach the pipeline's handler,
whose items go through the batcher to `run`.

Fields come as a JSON body, form fields or query parameters. With an api key, every route that
runs the model checks it, sent as the `api_key` field (body, form or query) or an
`Authorization: Bearer` header.

Backends: "native" decodes with aiayn itself; a text-to-text pipeline also takes "ctranslate2"
(a directory written by `aiayn export ctranslate2`), which has no attention weights.

Limits (`ServeLimits`) turn bad input into a 4xx that hurts nobody else: 413 for text over
`max_chars` or more than `max_texts` texts, 422 for a wrong type, an empty text or an unknown
field or a number that is not finite, 400 for malformed JSON or JSON nested over 16 deep, 403 for
a wrong or missing api key when the server has one, 503 (with Retry-After) when the queue is full,
504 after the request timeout. An error repeats at most 300 characters of the request. A client
that has not sent its whole request within `receive_timeout_s` loses its connection.
"""

import asyncio  # no `from __future__ import annotations`: FastAPI reads the route annotations at definition
import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull
from aiayn.tasks.pipeline import InputLimits, RequestError, Route

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class ServeLimits(InputLimits):
    max_beam: int = 16
    max_len_b: int = 256
    api_key: str = ""  # "" = no key needed; any key sent is ignored
    # An idle keep-alive connection stays open this long; it must exceed the request timeout. uvicorn
    # can arm its keep-alive timer after the next request on a connection has already arrived (its
    # issues #1637, #2097); the timer then cuts that request off unanswered when it fires. With
    # uvicorn's default of 5 s, a request that waited 5 s in a full queue was lost that way (a
    # ReadError the server never logged: `benchmarks/serve_load.py --overflow-only --overflow-runs N
    # --keep-alive 5` lost one request in 30 runs and one in 40; the default none in 55).
    # Longer than any request lives, the stray timer is replaced when that request is answered.
    keep_alive_s: float = 75.0
    # A client has this long to send a whole request (headers and body), counted from its first byte,
    # or from the connection's opening for its first request; a connection still sending is then
    # closed. uvicorn has no such bound (its keep-alive timer restarts on every byte received), so a
    # client sending half a request, a byte at a time, held a connection open indefinitely.
    receive_timeout_s: float = 20.0

    def __post_init__(self) -> None:
        if not 0 < self.keep_alive_s < float("inf"):  # NaN fails too
            raise ValueError(f"the keep-alive must be a positive number of seconds, got {self.keep_alive_s}")
        if not 0 < self.receive_timeout_s < float("inf"):
            raise ValueError(f"the receive timeout must be a positive number of seconds, got {self.receive_timeout_s}")


class HTTPProblem(RequestError):
    """A `RequestError` with response headers (e.g. Retry-After)."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message, status)
        self.message, self.headers = message, headers or {}


MAX_JSON_DEPTH = 16  # brackets nested in a JSON body; a request here needs 4 (images: a list of rows of numbers)


async def request_fields(request) -> dict[str, Any]:
    """The fields of a request however they came: query parameters, then a JSON body or form
    fields on top. A list in a form or query comes as repeated fields."""
    from starlette.requests import ClientDisconnect

    fields: dict[str, Any] = {}
    for key in request.query_params:
        values = request.query_params.getlist(key)
        fields[key] = values if len(values) > 1 else values[0]
    content_type = request.headers.get("content-type", "")
    try:
        if "application/json" in content_type:
            fields.update(parse_json_body(await request.body()))
        elif "form" in content_type:
            form = await request.form()
            for key in form:
                values = form.getlist(key)
                fields[key] = values if len(values) > 1 else values[0]
    except ClientDisconnect:  # e.g. closed by the receive deadline: a 400 to nobody, and no traceback
        raise HTTPProblem(400, "the connection closed before the whole request arrived") from None
    return fields


def parse_json_body(body: bytes) -> dict:
    """A JSON object whose numbers are all finite (json.loads reads NaN, Infinity and 1e400 as floats
    that no check expects) and whose brackets nest at most `MAX_JSON_DEPTH` deep (the depth is
    measured before parsing: 100,000 brackets would end json.loads in a RecursionError)."""
    depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise HTTPProblem(400, f"the JSON body nests {depth} brackets deep; at most {MAX_JSON_DEPTH}")
    try:
        parsed = json.loads(body or b"{}", parse_constant=_not_finite, parse_float=_finite_float)
    except HTTPProblem:
        raise
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, an integer of over 4,300 digits
        raise HTTPProblem(400, f"malformed JSON body: {e}") from None
    if not isinstance(parsed, dict):
        raise HTTPProblem(422, "the JSON body must be an object")
    return parsed


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # brackets inside strings do not nest
_BRACKET_STEP = np.zeros(256, dtype=np.int64)
_BRACKET_STEP[list(b"[{")], _BRACKET_STEP[list(b"]}")] = 1, -1


def json_depth(body: bytes) -> int:
    """How deep the brackets of a JSON text nest, outside its strings (0 for a bare value)."""
    steps = _BRACKET_STEP[np.frombuffer(_JSON_STRING.sub(b"", body), dtype=np.uint8)]
    return int(np.cumsum(steps).max(initial=0))


def _not_finite(name: str):
    raise HTTPProblem(422, f"{name} in the JSON body: numbers must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise HTTPProblem(422, f"{text[:20]} in the JSON body is too large: numbers must be finite")
    return value


MAX_ECHO = 200  # characters of a request's own text that an error message may repeat
MAX_ERRORS = 10  # validation errors listed in one answer


def shorten(message: str) -> str:
    """An error message cut to `MAX_ECHO` characters past its first hundred (which explain it), so a
    1 MB input never comes back as a 1 MB error; a float JSON cannot write is a string here too."""
    limit = 100 + MAX_ECHO
    return message if len(message) <= limit else f"{message[:limit]}... ({len(message) - limit} characters cut)"


def check_key(request, fields: dict, limits: ServeLimits) -> None:
    """The server's api key, when it has one, sent as a field or as `Authorization: Bearer KEY`."""
    if not limits.api_key:
        return
    import hmac

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = fields.get("api_key", token if scheme.lower() == "bearer" else None)
    if not (isinstance(given, str) and hmac.compare_digest(given.encode(), limits.api_key.encode())):  # constant time
        raise HTTPProblem(403, "invalid api_key" if given else "this server needs an api_key")


class ModelService:
    """The pipeline of one model directory and the batcher in front of its `run`: what a route
    handler sees as `server` (`decode`, `limits`)."""

    def __init__(self, model_dir: str | Path, device: str, batching: BatchConfig, limits: ServeLimits,
                 backend: str = "native"):
        from aiayn.tasks import load_pipeline

        self.model_dir, self.limits, self.backend = Path(model_dir), limits, backend
        self.pipeline = load_pipeline(model_dir, device=device, backend=backend)
        self.task = self.pipeline.task
        self.batcher = DynamicBatcher(self._run, batching, session=self._session)

    def _session(self, options: tuple):
        return self.pipeline.session(**dict(options))

    def _run(self, items: list, options: tuple) -> list:
        """In the batcher's worker: the items of several requests with the same `options`."""
        return self.pipeline.run(items, **dict(options))

    async def decode(self, items: list, **options) -> list:
        try:
            return await self.batcher.submit(items, tuple(sorted(options.items())))
        except QueueFull as e:
            raise HTTPProblem(503, f"server busy: {e}", {"Retry-After": "1"}) from None
        except asyncio.TimeoutError:
            raise HTTPProblem(504, f"no answer within {self.batcher.config.timeout_s:g} s") from None
        except RuntimeError as e:
            raise HTTPProblem(500, str(e)) from None


class StatusCounts:
    """ASGI middleware counting the responses by status class ("2xx", "4xx", "5xx", ...) for
    /metrics. An exception that escapes the app counts as the 500 that Starlette answers for it."""

    def __init__(self, app, counts: Counter):
        self.app, self.counts = app, counts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def counted(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.counts[f"{message['status'] // 100}xx"] += 1
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            if not started:
                self.counts["5xx"] += 1
            raise


def add_route(app, service: ModelService, route: Route) -> None:
    """`route` of the pipeline as an endpoint: fields in, the api key checked, the handler's answer out."""
    from fastapi import Request

    handler = getattr(service.pipeline, route.handler)

    async def endpoint(request: Request):
        fields = await request_fields(request)
        if route.runs_model:
            check_key(request, fields, service.limits)
        fields.pop("api_key", None)
        return await handler(fields, service)

    endpoint.__doc__ = handler.__doc__
    app.add_api_route(route.path, endpoint, methods=[route.method], summary=route.summary)


def page_form(routes) -> Optional[dict]:
    """The route the web page offers, the first with an example request (`Route.example`), or None."""
    for route in routes:
        if route.example:
            return {"path": route.path, "summary": route.summary, "example": json.loads(route.example)}
    return None


# -- the application ---------------------------------------------------------------------------
def create_app(model_dir: str | Path, device: str = "cpu", batching: BatchConfig = BatchConfig(),
               limits: ServeLimits = ServeLimits(), backend: str = "native"):
    """The FastAPI application serving `model_dir` with `backend` ("native", or "ctranslate2" for a text-to-text export); the batcher stops
    (finishing its queue) on shutdown."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse

    service = ModelService(model_dir, device, batching, limits, backend)

    @asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(service.batcher.close)

    app = FastAPI(title="aiayn", description=f"{service.task} with {model_dir}", lifespan=lifespan)
    app.state.service = service
    responses: Counter = Counter()
    app.add_middleware(StatusCounts, counts=responses)

    @app.exception_handler(RequestError)
    async def problem(request, e: RequestError):
        return JSONResponse({"error": shorten(str(e))}, status_code=e.status, headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        detail = [{"loc": list(x.get("loc", ())), "msg": shorten(str(x.get("msg", ""))),
                   "input": shorten(repr(x.get("input")))} for x in e.errors()[:MAX_ERRORS]]
        return JSONResponse({"error": "invalid request", "detail": detail}, status_code=422)

    @app.get("/health")
    async def health():
        """What the server runs, and what the web page needs: the route it offers, whether a key is needed."""
        return {"status": "ok", "task": service.task, "model": str(model_dir), "backend": service.backend,
                "routes": [r.path for r in service.pipeline.routes], "command": service.pipeline.command,
                "needs_key": bool(limits.api_key), "form": page_form(service.pipeline.routes)}

    @app.get("/metrics")
    async def metrics():
        batcher = service.batcher.stats.snapshot(service.batcher.queue_length)
        return {**batcher, "responses": dict(sorted(responses.items()))}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    for route in service.pipeline.routes:
        add_route(app, service, route)
    return app


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          batching: BatchConfig = BatchConfig(), limits: ServeLimits = ServeLimits(), backend: str = "native") -> None:
    """Run the server until SIGINT/SIGTERM; uvicorn then stops accepting and finishes in-flight requests."""
    import uvicorn

    if limits.keep_alive_s <= batching.timeout_s:
        log.warning("the keep-alive (%g s) is not longer than the request timeout (%g s): uvicorn may cut off a "
                    "waiting request when it ends (see ServeLimits.keep_alive_s)", limits.keep_alive_s, batching.timeout_s)
    if not limits.api_key and not is_loopback(host):
        log.warning("serving on %s without an api key: anyone who can reach this address can run the model "
                    "(aiayn serve --api-key KEY)", host)
    app = create_app(model_dir, device, batching, limits, backend)
    uvicorn.Server(uvicorn_config(app, host, port, limits)).run()


def is_loopback(host: str) -> bool:
    """Whether `host` binds this machine's loopback interface only ("localhost", 127.x.x.x, ::1)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost
        return False


def uvicorn_config(app, host: str, port: int, limits: ServeLimits = ServeLimits(), log_level: str = "info",
                   http: str = "auto"):
    """How `serve` runs `app` with uvicorn: 30 s to finish in-flight requests on shutdown, idle
    connections kept `limits.keep_alive_s`, a request received whole within `limits.receive_timeout_s`
    (`http`: uvicorn's HTTP implementation under that bound, "auto", "httptools" or "h11"), and no
    api key in the access log."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=30,
                            timeout_keep_alive=limits.keep_alive_s,  # it sets up uvicorn's loggers
                            http=receive_bounded(http, limits.receive_timeout_s))
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactApiKey) for f in access.filters):
        access.addFilter(RedactApiKey())
    return config


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


__all__ = ["BatchConfig", "ServeLimits", "create_app", "serve"]
