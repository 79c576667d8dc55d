"""`aiayn serve`: a model directory behind HTTP (FastAPI), batched across requests.

Endpoints, for a translation model:
    POST /translate        LibreTranslate's API: `q` (a string or a list), `source`, `target`,
                           `format`, `api_key`, as a JSON body, form fields or query parameters;
                           answers {"translatedText": a string, or a list for a list}
    GET  /languages        [{"code", "name", "targets"}] from the model's language pair
    POST /v1/translate     {"text": [...], "beam_size", "length_penalty", "max_len_b", "method",
                           "nbest", "no_repeat_ngram_size", "return_attention"}: only these
                           fields, each capped; hypotheses with
                           scores and, on request, the 1-best's cross-attention
    GET  /health, GET /metrics, GET /docs (FastAPI's OpenAPI page), GET / (the web page)

Summarization and QA model directories get POST /v1/summarize and /v1/answer instead of the
translation routes: `TASK_ROUTES` maps the task in a model directory's task.json to the
function that adds its routes, so a new task adds one entry.

Backends (`load_backend`, the one place that chooses): "native" decodes with aiayn's own
`Translator` on a model directory; "ctranslate2" with `aiayn.export.ct2_translator.CT2Translator` on a
directory written by `aiayn export ctranslate2`, behind the same routes. It has no attention
weights: a request for them answers 400.

Limits (`ServeLimits`) turn bad input into a 4xx that hurts nobody else: 413 for text over
`max_chars` or more than `max_texts` texts, 422 for a wrong type, an empty `q` or an unknown
field, 403 for a wrong `api_key` when the server has one, 503 (with Retry-After) when the
queue is full, 504 after the request timeout.
"""

import asyncio  # no `from __future__ import annotations`: FastAPI reads the route annotations at definition
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class ServeLimits:
    max_chars: int = 2000  # per text
    max_texts: int = 64  # per request
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

    def __post_init__(self) -> None:
        if not 0 < self.keep_alive_s < float("inf"):  # NaN fails too
            raise ValueError(f"the keep-alive must be a positive number of seconds, got {self.keep_alive_s}")


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def check_texts(texts: Any, limits: ServeLimits, field: str) -> list[str]:
    """A string or a non-empty list of strings, within the limits -> list of strings."""
    items = [texts] if isinstance(texts, str) else texts
    if not isinstance(items, list) or not items or not all(isinstance(t, str) for t in items):
        raise HTTPProblem(422, f"{field} must be a non-empty string or a non-empty list of strings")
    if not any(t.strip() for t in items):
        raise HTTPProblem(422, f"{field} is empty")
    if len(items) > limits.max_texts:
        raise HTTPProblem(413, f"{len(items)} texts in one request; at most {limits.max_texts}")
    longest = max(len(t) for t in items)
    if longest > limits.max_chars:
        raise HTTPProblem(413, f"a text of {longest} characters; at most {limits.max_chars}")
    return items


async def request_fields(request) -> dict[str, Any]:
    """The fields of a LibreTranslate request however they came: query parameters, then a JSON
    body or form fields on top. A list of q in a form or query comes as repeated fields."""
    fields: dict[str, Any] = {}
    for key in request.query_params:
        values = request.query_params.getlist(key)
        fields[key] = values if len(values) > 1 else values[0]
    content_type = request.headers.get("content-type", "")
    if "application/json" in content_type:
        try:
            body = json.loads(await request.body() or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HTTPProblem(400, f"malformed JSON body: {e}") from None
        if not isinstance(body, dict):
            raise HTTPProblem(422, "the JSON body must be an object")
        fields.update(body)
    elif "form" in content_type:
        form = await request.form()
        for key in form:
            values = form.getlist(key)
            fields[key] = values if len(values) > 1 else values[0]
    return fields


class ModelService:
    """The loaded model of one directory, its task's entry point, and the batcher in front of it."""

    def __init__(self, model_dir: str | Path, device: str, batching: BatchConfig, limits: ServeLimits,
                 backend: str = "native"):
        from aiayn.tasks.base import read_task_info

        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
        self.model_dir, self.limits, self.backend = Path(model_dir), limits, backend
        self.info = read_task_info(model_dir)
        self.task = self.info.get("task", "translation")
        if self.task not in TASK_ROUTES:
            raise ValueError(f"{model_dir}: aiayn serve has no routes for task {self.task!r} "
                             f"(it serves {', '.join(TASK_ROUTES)})")
        self.translator = load_backend(backend, model_dir, device)  # the routes build each task's sources
        self.batcher = DynamicBatcher(self._run, batching, session=self._session)

    def _session(self, options: tuple):
        """A continuous-batching session for these options, or None (the batcher then decodes whole
        calls): the native backend's beam search without attention maps."""
        settings = dict(options)
        if settings.pop("return_attention", False):
            return None
        return self.translator.continuous(**settings)

    def _run(self, texts: list[str], options: tuple) -> list:
        """In the batcher's worker: decode `texts` with the frozen `options` of their requests."""
        settings = dict(options)
        want_attention = settings.pop("return_attention", False)
        nbest = settings.pop("nbest", None)
        results = self.translator.translate(texts, nbest=nbest, **settings)
        if not want_attention:
            return results
        decode, _ = self.translator.settings(settings, nbest)  # the length limits these outputs had
        best = [r if isinstance(r, str) else r[0][0] for r in results]  # str, or an n-best list
        return [(r, cross_attention(self.translator, t, b, decode)) for t, r, b in zip(texts, results, best)]

    async def decode(self, texts: list[str], **options) -> list:
        try:
            return await self.batcher.submit(texts, tuple(sorted(options.items())))
        except QueueFull as e:
            raise HTTPProblem(503, f"server busy: {e}", {"Retry-After": "1"}) from None
        except asyncio.TimeoutError:
            raise HTTPProblem(504, f"no answer within {self.batcher.config.timeout_s:g} s") from None
        except RuntimeError as e:
            raise HTTPProblem(500, str(e)) from None

    def languages(self) -> tuple[str, str]:
        pair = self.info.get("languages") or ["src", "tgt"]
        return pair[0], pair[1]


BACKENDS = ("native", "ctranslate2")


def load_backend(backend: str, model_dir: str | Path, device: str):
    """The translator of `model_dir`: aiayn's `Translator` ("native") or, for a directory written by
    `aiayn export ctranslate2`, a `CT2Translator` ("ctranslate2"); both set up as its task.json says."""
    from aiayn.export import MANIFEST

    if backend == "ctranslate2":
        from aiayn.export.ct2_translator import CT2Translator

        return CT2Translator.from_pretrained(model_dir, device=device)
    if (Path(model_dir) / MANIFEST).is_file():
        raise ValueError(f"{model_dir}: a CTranslate2 export ({MANIFEST}); serve it with --backend ctranslate2")
    from aiayn.tasks.seq2seq import load_translator

    return load_translator(model_dir, device)


def cross_attention(translator, source: str, output: str, decode) -> dict:
    """The encoder-decoder attention of `output` given `source` (one teacher-forced pass of the
    output's tokens, re-encoded from its text, with the EOS that ended it unless `decode`'s length
    limit did): layers x heads x target x source, with the pieces."""
    import torch

    from aiayn.config import BOS_ID
    from aiayn.decoding.common import encode_source
    from aiayn.plots.attention import forward_attention, with_end

    tok, device = translator.tokenizers, translator.device
    src = torch.tensor([encode_source(tok.src, source, translator.max_input_tokens, translator.keep)], device=device)
    out = with_end(translator.model, src, tok.tgt.encode(output), decode.max_len_a, decode.max_len_b)
    _, _, per_layer = forward_attention(translator.model, src, torch.tensor([[BOS_ID, *out[:-1]]], device=device))
    cross = torch.stack([w[0] for w in per_layer]).float().cpu()  # (L, H, T, S)
    return {"weights": [[[[round(x, 4) for x in row] for row in head] for head in layer] for layer in cross.tolist()],
            "source": tok.src.pieces(src[0].tolist()), "target": tok.tgt.pieces(out)}


# -- routes, per task --------------------------------------------------------------------------
def translation_routes(app, service: ModelService) -> None:
    from fastapi import Request
    from pydantic import BaseModel, ConfigDict, Field

    limits = service.limits

    @app.post("/translate", summary="LibreTranslate-compatible translation")
    async def libretranslate(request: Request):
        fields = await request_fields(request)
        check_key(fields.get("api_key"), limits)
        source, target = service.languages()
        for name, want in (("source", source), ("target", target)):
            given = fields.get(name)
            if given not in (None, "", "auto", want) and service.info.get("languages"):
                raise HTTPProblem(400, f"this server translates {source} -> {target}; {name} {given!r} is not served")
        if fields.get("format", "text") not in ("text", "html"):
            raise HTTPProblem(422, f"format must be 'text', got {fields.get('format')!r}")
        if "q" not in fields:
            raise HTTPProblem(422, "missing field q")
        texts = check_texts(fields["q"], limits, "q")
        results = await service.decode(texts)
        return {"translatedText": results if isinstance(fields["q"], list) else results[0]}

    @app.get("/languages", summary="the model's language pair, LibreTranslate style")
    async def languages():
        source, target = service.languages()
        return [{"code": source, "name": source, "targets": [target]}]

    class NativeRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        text: list[str] = Field(min_length=1)
        method: Literal["beam", "greedy"] = "beam"
        beam_size: int = Field(default=4, ge=1, le=limits.max_beam)
        length_penalty: float = Field(default=0.6, ge=0.0, le=2.0)
        max_len_b: int = Field(default=50, ge=1, le=limits.max_len_b)
        nbest: int = Field(default=1, ge=1, le=limits.max_beam)
        no_repeat_ngram_size: int = Field(default=0, ge=0, le=limits.max_len_b)
        return_attention: bool = False

    @app.post("/v1/translate", summary="translation with decoding options, scores and attention")
    async def native(body: NativeRequest):
        texts = check_texts(body.text, limits, "text")
        if body.return_attention and service.backend != "native":
            raise HTTPProblem(400, f"return_attention: attention weights are not available with the "
                                   f"{service.backend} backend")
        beam = body.beam_size if body.method == "beam" else 1
        nbest = min(body.nbest, beam) if beam > 1 else None
        results = await service.decode(texts, method=body.method, beam_size=beam, length_penalty=body.length_penalty,
                                       max_len_b=body.max_len_b, no_repeat_ngram_size=body.no_repeat_ngram_size,
                                       nbest=nbest, return_attention=body.return_attention)
        return {"translations": [_native_result(r) for r in results]}


def _native_result(result) -> dict:
    hyps, attention = result if isinstance(result, tuple) else (result, None)
    if isinstance(hyps, str):
        hyps = [(hyps, None)]
    out = {"text": hyps[0][0], "hypotheses": [{"text": t, "score": s} for t, s in hyps]}
    if attention is not None:
        out["attention"] = attention
    return out


def text_task_routes(path: str, field: str, call: Callable) -> Callable:
    """Routes of a task whose pipeline maps texts to texts (summarize) or pairs to texts (answer)."""
    def add(app, service: ModelService) -> None:
        from fastapi import Request

        @app.post(path, summary=f"{service.task} with the served model")
        async def handle(request: Request):
            fields = await request_fields(request)
            check_key(fields.get("api_key"), service.limits)
            sources = call(fields, service.limits)
            return {field: await service.decode(sources)}
    return add


def _summarize_sources(fields: dict, limits: ServeLimits) -> list[str]:
    from aiayn.tasks.summarization import flatten

    return [flatten(t) for t in check_texts(fields.get("text"), limits, "text")]


def _answer_sources(fields: dict, limits: ServeLimits) -> list[str]:
    from aiayn.tasks.qa import qa_source

    contexts = check_texts(fields.get("context"), limits, "context")
    questions = check_texts(fields.get("question"), limits, "question")
    if len(contexts) != len(questions):
        raise HTTPProblem(422, f"{len(contexts)} contexts but {len(questions)} questions")
    return [qa_source(c, q) for c, q in zip(contexts, questions)]


TASK_ROUTES: dict[str, Callable] = {
    "translation": translation_routes,
    "summarization": text_task_routes("/v1/summarize", "summaries", _summarize_sources),
    "qa": text_task_routes("/v1/answer", "answers", _answer_sources),
}


def check_key(given: Any, limits: ServeLimits) -> None:
    if limits.api_key and given != limits.api_key:
        raise HTTPProblem(403, "invalid api_key")


# -- the application ---------------------------------------------------------------------------
def create_app(model_dir: str | Path, device: str = "cpu", batching: BatchConfig = BatchConfig(),
               limits: ServeLimits = ServeLimits(), backend: str = "native"):
    """The FastAPI application serving `model_dir` with `backend` (see `BACKENDS`); the batcher stops
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

    @app.exception_handler(HTTPProblem)
    async def problem(request, e: HTTPProblem):
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        return JSONResponse({"error": "invalid request", "detail": json.loads(json.dumps(e.errors(), default=str))},
                            status_code=422)

    @app.get("/health")
    async def health():
        return {"status": "ok", "task": service.task, "model": str(model_dir), "backend": service.backend}

    @app.get("/metrics")
    async def metrics():
        return service.batcher.stats.snapshot(service.batcher.queue_length)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    TASK_ROUTES[service.task](app, service)
    return app


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          batching: BatchConfig = BatchConfig(), limits: ServeLimits = ServeLimits(), backend: str = "native") -> None:
    """Run the server until SIGINT/SIGTERM; uvicorn then stops accepting and finishes in-flight requests."""
    import uvicorn

    if limits.keep_alive_s <= batching.timeout_s:
        log.warning("the keep-alive (%g s) is not longer than the request timeout (%g s): uvicorn may cut off a "
                    "waiting request when it ends (see ServeLimits.keep_alive_s)", limits.keep_alive_s, batching.timeout_s)
    app = create_app(model_dir, device, batching, limits, backend)
    uvicorn.Server(uvicorn_config(app, host, port, limits)).run()


def uvicorn_config(app, host: str, port: int, limits: ServeLimits = ServeLimits(), log_level: str = "info"):
    """How `serve` runs `app` with uvicorn: 30 s to finish in-flight requests on shutdown, and idle
    connections kept `limits.keep_alive_s`."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=30,
                          timeout_keep_alive=limits.keep_alive_s)


__all__ = ["BatchConfig", "ServeLimits", "create_app", "serve", "dataclasses"]
