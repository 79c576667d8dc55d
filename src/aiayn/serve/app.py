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
from collections import Counter
from pathlib import Path
from typing import Optional

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull
from aiayn.serve.limits import ServeLimits
from aiayn.serve.requests import MAX_ERRORS, HTTPProblem, check_key, request_fields, shorten
from aiayn.serve.server import is_loopback, uvicorn_config
from aiayn.tasks import RequestError, Route

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


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


__all__ = ["BatchConfig", "ServeLimits", "create_app", "serve"]
