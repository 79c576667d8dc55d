"""`aiayn serve`: model directories behind HTTP (FastAPI), batched across requests.

The routes are the models': `aiayn.tasks.load_pipeline` reads each directory's task.json and its
pipeline names its routes (`Pipeline.routes`, in `serve.routes`), e.g. for a translation model
LibreTranslate's POST /translate and GET /languages, and POST /v1/translate; /v1/summarize, /v1/answer,
/v1/generate, /v1/classify or /v1/embed for the other tasks. Several translation directories share
those routes: a request goes to the directory that accepts its `source` and `target` (`Route.accepts`),
/languages lists every pair of the server, and a pair none serves is a 400 that lists them. Every
server adds GET /health, GET /metrics (Prometheus' text format), GET /v1/metrics (the same counters as
JSON), GET /docs and /openapi.json (every route's request and response schema, with an example) and
GET / (the web page). This module names no task: a request's fields are validated by the route's
request model (`serve.routes.fields`) and reach its handler, whose items go through the batcher to the
pipeline's `run`, `session` or `stream`, in a worker process (`serve.worker`) unless
`BatchConfig.worker` is "thread". A handler that answers with an async iterator of events
(`"stream": true`) is sent as server-sent events.

Fields come as a JSON body, form fields or query parameters; form and query values are text, so
numbers, true/false and one-text lists come typed in JSON only (LibreTranslate's `/translate` reads
its `alternatives` from text too; the native `/v1/...` routes take JSON). With api keys (`--api-key`, or
`--api-keys FILE` with limits per key: `serve.keys`), every route that runs the model checks the
key, sent as the `api_key` field (body, form or query) or an `Authorization: Bearer` header.

Backends: "native" decodes with aiayn itself; a text-to-text pipeline also takes "ctranslate2"
(a directory written by `aiayn export ctranslate2`), which has no attention weights.

Limits (`ServeLimits`) turn bad input into a 4xx that hurts nobody else: 413 for text over
`max_chars`, more than `max_texts` texts or a body over `max_body_bytes`, 422 for a wrong type, a
request with no text that is not empty (an empty one among others answers ""), an unknown field or
a number that is not finite or not within 64 bits, 400 for malformed JSON or JSON nested over 16 deep, 403 for
a wrong or missing api key when the server has one, 429 (with Retry-After) for a key over its
limits, 503 (with Retry-After) when the queue is full or the decoder process died, 504 after the
request timeout. An error repeats at most 300 characters of the request. A client that has not
sent its whole request within `receive_timeout_s` loses its connection; one that disconnects
while its request is decoded takes it out of the running search at the next step.
"""

import asyncio  # no `from __future__ import annotations`: FastAPI reads the route annotations at definition
import contextlib
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Sequence

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull, Unavailable
from aiayn.serve.keys import UNLIMITED, KeyRing, given_key
from aiayn.serve.limits import KeyLimits, ServeLimits
from aiayn.serve.metrics import prometheus_text
from aiayn.serve.requests import MAX_ERRORS, HTTPProblem, request_fields, shorten
from aiayn.serve.routes import routes_of
from aiayn.serve.routes.fields import validate
from aiayn.serve.server import draining_server, is_loopback, uvicorn_config
from aiayn.serve.worker import PipelineRunner, WorkerProcess
from aiayn.tasks import RequestError, load_pipeline, task_class, task_of

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


class ModelService:
    """The pipeline of one model directory and the batcher in front of its `run`, `session` and
    `stream`: what a route handler sees as `server` (`decode`, `stream`, `limits`, `directions`).

    With `batching.worker == "process"` the model decodes in a worker process of its own
    (`WorkerProcess`); this process keeps a copy of the pipeline on the CPU for the handlers,
    which read requests and shape answers but never decode."""

    def __init__(self, model_dir: str | Path, device: str, batching: BatchConfig, limits: ServeLimits,
                 backend: str = "native", options: dict | None = None):
        self.model_dir, self.limits, self.backend = Path(model_dir), limits, backend
        in_process = batching.worker == "thread"
        options = options or {}  # how the decoder computes (precision, quantize): only where it decodes
        self.pipeline = load_pipeline(model_dir, device=device if in_process else "cpu", backend=backend,
                                      **(options if in_process else {}))
        self.task, self.routes = self.pipeline.task, routes_of(self.pipeline)
        self.worker = (PipelineRunner(self.pipeline) if in_process
                       else WorkerProcess(model_dir, device, backend, options))
        self.batcher = DynamicBatcher(self.worker.run, batching, session=self.worker.session, stream=self.worker.stream)
        self.directions: tuple = self.pipeline.directions()  # every pair of the whole server: `create_app` sets it

    async def decode(self, items: list, **options) -> list:
        with self.problems():
            return await self.batcher.submit(items, tuple(sorted(options.items())))

    async def stream(self, item, **options):
        """The pieces of one item's output, as they are decoded (`Pipeline.stream`)."""
        with self.problems():
            async for piece in self.batcher.stream(item, tuple(sorted(options.items()))):
                yield piece

    @contextlib.contextmanager
    def problems(self):
        """The batcher's failures as HTTP answers."""
        try:
            yield
        except QueueFull as e:
            raise HTTPProblem(503, f"server busy: {e}", {"Retry-After": "1"}) from None
        except Unavailable as e:
            raise HTTPProblem(503, f"the decoder restarted: {e}", {"Retry-After": "1"}) from None
        except asyncio.TimeoutError:
            raise HTTPProblem(504, f"no answer within {self.batcher.config.timeout_s:g} s") from None
        except RuntimeError as e:
            raise HTTPProblem(500, str(e)) from None

    def snapshot(self) -> dict:
        return {**self.batcher.stats.snapshot(self.batcher.queue_length),
                "worker_pid": getattr(self.worker, "pid", None), "worker_restarts": getattr(self.worker, "restarts", 0)}

    def close(self) -> None:
        """Finish the queue, then stop the worker process (if any)."""
        self.batcher.close()
        getattr(self.worker, "close", lambda: None)()


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


def add_route(app, served: list, keys: KeyRing) -> None:
    """One endpoint for a route that one or more directories serve (`served`: [(service, route)], all of
    one method and path): fields in, the directory that accepts them chosen (`Route.accepts`), the api key
    checked, the fields validated by the route's request model, the handler's answer out (server-sent
    events for an async iterator of events). Fields come as JSON, form fields or query parameters, so the
    endpoint reads them itself (`request_fields`) and /openapi.json is told the body's schema."""
    from fastapi import Request

    first_service, first = served[0]

    async def endpoint(request: Request):
        fields = await request_fields(request, first_service.limits.max_body_bytes)
        service, route = next(((s, r) for s, r in served if r.accepts(s.pipeline, fields)), served[0])
        charged = keys.check(given_key(request, fields), texts_of(fields, route)) if route.runs_model else None
        fields.pop("api_key", None)
        try:
            body = validate(route.body, fields, service.limits) if route.body else None  # a GET: fields ignored
            return await until_disconnected(request, answer(route.handler(service.pipeline, body, service)))
        except RequestError:  # input refused: nothing was decoded, so nothing is charged to the key
            keys.refund(charged)
            raise

    endpoint.__doc__ = first.handler.__doc__
    schema = {"schema": {"$ref": f"#/components/schemas/{first.body.__name__}"}} if first.body else None
    body = {"requestBody": {"required": True, "content": {"application/json": schema,
                                                          "application/x-www-form-urlencoded": schema}}}
    app.add_api_route(first.path, endpoint, methods=[first.method], summary=first.summary,
                      responses={200: {"model": first.response}} if first.response else None,
                      openapi_extra=body if schema else None)


def with_request_schemas(app, models: list) -> None:
    """/openapi.json with the request models that `add_route` refers to (FastAPI lists only those it reads
    itself)."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:  # built once, as FastAPI's own: the request schemas added then
            components = generate().setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                own = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(own.pop("$defs", {}))
                components[model.__name__] = own
        return app.openapi_schema

    app.openapi = openapi


def texts_of(fields: dict, route) -> dict:
    """The fields of a request that an api key's character budget counts: the route's texts (not its language
    codes or settings), or every field where the route names none."""
    return {k: v for k, v in fields.items() if k in route.texts} if route.texts else fields


async def answer(handled):
    """A handler's answer: as it is, or, for an async iterator of events, its first event awaited
    (so that a refusal or a full queue is still an HTTP error) and then a stream of server-sent events."""
    from fastapi.responses import StreamingResponse

    result = await handled
    if not hasattr(result, "__aiter__"):
        return result
    first = await result.__anext__()

    async def events():
        try:
            yield sse(first)
            async for event in result:
                yield sse(event)
        except RequestError as e:  # after the 200 has gone: the error is the last event
            yield sse({"error": shorten(str(e)), "status": e.status}, "error")
        finally:
            await result.aclose()

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def sse(event: dict, kind: str = "") -> str:
    return (f"event: {kind}\n" if kind else "") + f"data: {json.dumps(event)}\n\n"


async def until_disconnected(request, work):
    """`work` awaited, unless the client disconnects first: then it is cancelled (a request still
    queued is dropped, one being decoded leaves the search at its next step) and nobody is answered."""
    from fastapi.responses import Response

    async def disconnected():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        gone = not task.done()
        if gone:
            task.cancel()  # a future is cancelled at once; a coroutine's task at its next await
    if gone:
        await asyncio.gather(task, return_exceptions=True)  # the cancellation lands before the answer
        log.info("%s %s: the client went away; its work was dropped", request.method, request.url.path)
        return Response(status_code=499)  # nginx's "client closed request": for the access log and /metrics only
    return task.result()


def page_forms(services: list) -> list[dict]:
    """The forms the web page offers: one per route it shows, with an example request (`Route.example`), across every
    directory served (a server of several models offers each model's), each with its command's name."""
    forms: dict[str, dict] = {}
    for service in services:
        for route in service.routes:
            if route.page and route.path not in forms:
                forms[route.path] = {"path": route.path, "summary": route.summary, "example": route.example,
                                     "command": service.pipeline.command, "task": service.task}
    return list(forms.values())


# -- the application ---------------------------------------------------------------------------
def create_app(model_dir: str | Path | Sequence[str | Path], device: str = "cpu", batching: BatchConfig = BatchConfig(),
               limits: ServeLimits = ServeLimits(), backend: str = "native", options: dict | None = None):
    """The FastAPI application serving one model directory or several (`model_dir`: a path or a list)
    with `backend` ("native", or "ctranslate2" for a text-to-text export) and the decoder's `options`
    (`precision`, `quantize`: `aiayn.tasks.load_pipeline`). Directories whose
    pipelines share a route (two translation models) share its endpoint, which picks the one that
    accepts a request (its language pair); two directories of one route without languages to tell
    them apart are an error. The batchers stop (finishing their queues) on shutdown."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    services = _services(model_dir, device, batching, limits, backend, options)
    routes = served_routes(services)
    keys = KeyRing({**dict(limits.api_keys), **({limits.api_key: UNLIMITED} if limits.api_key else {})})  # both flags: both keys

    @asynccontextmanager
    async def lifespan(app):
        yield
        for service in services:
            await asyncio.to_thread(service.close)

    names = ", ".join(f"{s.task} with {s.model_dir}" for s in services)
    app = FastAPI(title="aiayn", description=names, lifespan=lifespan)
    app.state.service, app.state.services = services[0], services
    responses: Counter = Counter()
    app.add_middleware(StatusCounts, counts=responses)
    if limits.cors_origins:  # a browser page elsewhere (a LibreTranslate client) may call; preflights answered
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"])
    _add_error_handlers(app)
    _add_status_routes(app, services, routes, keys, responses)
    grouped: dict = {}
    for service, route in routes:
        grouped.setdefault((route.method, route.path), []).append((service, route))
    for served in grouped.values():
        add_route(app, served, keys)
    with_request_schemas(app, list(dict.fromkeys(route.body for _, route in routes if route.body)))
    return app


def _services(model_dir, device, batching, limits, backend, options) -> list:
    """A `ModelService` per directory (each given once), every one told all the language pairs served."""
    dirs = [model_dir] if isinstance(model_dir, (str, Path)) else list(model_dir)
    if not dirs:
        raise ValueError("no model directory to serve")
    seen = Counter(Path(d).resolve() for d in dirs)
    twice = sorted({str(d) for d in dirs if seen[Path(d).resolve()] > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)}: one model directory given twice")
    services = [ModelService(d, device, batching, limits, backend, share) for d, share in zip(dirs, _shares(dirs, options))]
    directions = tuple(dict.fromkeys(pair for s in services for pair in s.pipeline.directions()))
    for service in services:
        service.directions = directions
    return services


def _shares(dirs: list, options: dict | None) -> list[dict]:
    """Each directory's share of the decoder options (`--precision`, `--quantize`): those its task takes. An
    option some directories do not take applies to the others, and a warning names both; one that none
    takes goes to each, whose pipeline refuses it (a single directory: as `aiayn translate` would)."""
    options = options or {}
    takes = [set(task_class(task_of(d)).pipeline.load_options) for d in dirs]
    for name in options:
        some = [str(d) for d, own in zip(dirs, takes) if name in own]
        others = [str(d) for d, own in zip(dirs, takes) if name not in own]
        if some and others:
            log.warning("--%s applies to %s; not to %s, whose task has no such option", name.replace("_", "-"),
                        ", ".join(some), ", ".join(others))
    return [{k: v for k, v in options.items() if k in own or not any(k in t for t in takes)} for own in takes]


def _add_error_handlers(app) -> None:
    """Every error answers {"error": ...}: ours, FastAPI's validation (with its details) and starlette's 404/405."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(RequestError)
    async def problem(request, e: RequestError):
        return JSONResponse({"error": shorten(str(e))}, status_code=e.status, headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        detail = [{"loc": list(x.get("loc", ())), "msg": shorten(str(x.get("msg", ""))),
                   "input": shorten(repr(x.get("input")))} for x in e.errors()[:MAX_ERRORS]]
        return JSONResponse({"error": "invalid request", "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_problem(request, e: StarletteHTTPException):  # starlette's own 404 and 405: our error shape
        return JSONResponse({"error": shorten(str(e.detail))}, status_code=e.status_code,
                            headers=getattr(e, "headers", None))


def _add_status_routes(app, services: list, routes: list, keys: KeyRing, responses: Counter) -> None:
    """/health, /v1/metrics, /metrics (Prometheus) and the web page at /."""
    from fastapi.responses import FileResponse, JSONResponse, Response

    @app.head("/health", include_in_schema=False)  # a load balancer's probe may be either
    @app.get("/health")
    async def health():
        """What the server runs, and what the web page needs: the route it offers, whether a key is needed.
        A 503 while a decoder that died could not be started again: a load balancer then sends elsewhere."""
        first = services[0]
        down = {str(s.model_dir): s.worker.start_failed for s in services if s.worker.start_failed}
        body = {"status": "unavailable" if down else "ok", **({"unavailable": down} if down else {}),
                "task": first.task, "model": str(first.model_dir), "backend": first.backend,
                "routes": list(dict.fromkeys(r.path for _, r in routes)), "command": first.pipeline.command,
                "needs_key": bool(keys), "forms": page_forms(services),
                "languages": [list(pair) for pair in first.directions],
                "models": [{"model": str(s.model_dir), "task": s.task, "routes": [r.path for r in s.routes],
                            "directions": [list(p) for p in s.pipeline.directions()]} for s in services]}
        return JSONResponse(body, status_code=503) if down else body

    def snapshot() -> dict:
        return {"models": {str(s.model_dir): s.snapshot() for s in services},
                "responses": dict(sorted(responses.items())), "refused": dict(sorted(keys.refused.items()))}

    @app.get("/v1/metrics")
    async def json_metrics():
        """The counters as JSON: the first directory's batcher at the top level, every directory's under "models"."""
        counts = snapshot()
        return {**counts["models"][str(services[0].model_dir)], **counts}

    @app.get("/metrics")
    async def metrics():
        """The same counters in Prometheus' text format."""
        body, content_type = prometheus_text(snapshot)
        return Response(body, media_type=content_type)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")


def served_routes(services: list) -> list:
    """(service, route) for every route of every directory; a route several directories share must
    be told apart by language (each of them translates named pairs)."""
    pairs, owners = [], {}
    for service in services:
        for route in service.routes:
            for other in owners.setdefault((route.method, route.path), []):
                mine, theirs = set(service.pipeline.directions()), set(other.pipeline.directions())
                if not (mine and theirs):
                    raise ValueError(f"{route.method} {route.path} is a route of both {other.model_dir} and "
                                     f"{service.model_dir}: serve them apart (only translation models of named "
                                     "language pairs share a route)")
                if mine & theirs:
                    both = ", ".join(f"{a}->{b}" for a, b in sorted(mine & theirs))
                    raise ValueError(f"{other.model_dir} and {service.model_dir} both translate {both}: a request "
                                     "could not choose between them; serve them apart")
            owners[(route.method, route.path)].append(service)
            pairs.append((service, route))
    return pairs


def serve(model_dir: str | Path | Sequence[str | Path], host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          batching: BatchConfig = BatchConfig(), limits: ServeLimits = ServeLimits(), backend: str = "native",
          options: dict | None = None) -> None:
    """Run the server until SIGINT/SIGTERM. Then every accepted request is answered within the request timeout,
    which uvicorn's shutdown window outlasts (`server.uvicorn_config`): the queue is still decoded, a queued
    request that its timeout runs out on gets a 503 with Retry-After, as a new one does (`DynamicBatcher.drain`);
    then the worker processes stop."""
    if limits.keep_alive_s <= batching.timeout_s:
        log.warning("the keep-alive (%g s) is not longer than the request timeout (%g s): uvicorn may cut off a "
                    "waiting request when it ends (see ServeLimits.keep_alive_s)", limits.keep_alive_s, batching.timeout_s)
    if not (limits.api_key or limits.api_keys) and not is_loopback(host):
        log.warning("serving on %s without an api key: anyone who can reach this address can run the model "
                    "(aiayn serve --api-key KEY)", host)
    app = create_app(model_dir, device, batching, limits, backend, options)
    config = uvicorn_config(app, host, port, limits, timeout_s=batching.timeout_s)
    draining_server(config, lambda: [service.batcher.drain() for service in app.state.services]).run()


__all__ = ["BatchConfig", "KeyLimits", "ServeLimits", "create_app", "serve"]
