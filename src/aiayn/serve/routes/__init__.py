"""The HTTP routes of the tasks: each a request model (pydantic, `fields.Body`), a response model, and a
handler that calls plain pipeline methods. A pipeline names the module of its routes in `Pipeline.routes`
("module:NAME", e.g. "aiayn.serve.routes.translation:ROUTES"); a task defined outside aiayn declares its
own the same way, next to it (the plug-in task of tests/tasks). Tasks themselves know no HTTP.

A handler is `async (pipeline, body, server) -> answer`: `body` the validated request model, `server` the
model's `ModelService` (`decode(items, **options)`, `stream(item, **options)`, `limits`, `directions`);
the answer is a dict, or an async iterator of events, sent as server-sent events."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from aiayn.serve.routes.fields import Body


def always(pipeline, fields: dict) -> bool:
    return True


@dataclass(frozen=True)
class Route:
    """An HTTP route: `body` validates its request (None: it takes none), `response` documents its answer."""

    method: str  # "GET" | "POST"
    path: str
    handler: Callable[[Any, Optional[Body], Any], Awaitable]
    summary: str
    body: Optional[type[Body]] = None
    response: Any = None  # a pydantic model (or type) of the answer, for /openapi.json
    runs_model: bool = True  # it decodes: guarded by the server's api key
    texts: tuple[str, ...] = ()  # the fields an api key's character budget counts; () = every field
    page: bool = False  # the web page at / offers it, with the body's example
    # Where several directories serve this route, whether this pipeline answers a request's fields (the
    # first that does answers; if none does, the first, which refuses with its own error)
    accepts: Callable[[Any, dict], bool] = always

    @property
    def example(self) -> dict:
        """The request body that /docs shows and the web page imitates: a box per field (the box's id is the
        field's name), sent as a string, or as a one-string list where the example holds one, or read as
        JSON where it holds anything else (pixel rows); true/false is sent as given, except that
        return_attention asks for the attention only from a backend that has it."""
        return (self.body.model_config.get("json_schema_extra") or {}).get("examples", [{}])[0] if self.body else {}


def routes_of(pipeline) -> tuple[Route, ...]:
    """The routes a pipeline names (`Pipeline.routes`: "module:NAME" of a tuple of `Route`)."""
    if not pipeline.routes:
        return ()
    module, _, name = pipeline.routes.partition(":")
    return tuple(getattr(importlib.import_module(module), name))


async def text_events(pieces: AsyncIterator[str]) -> AsyncIterator[dict]:
    """A streamed answer's events: {"piece": text} for each new piece, then {"text": the whole text,
    "done": true}."""
    parts = []
    async for piece in pieces:
        parts.append(piece)
        yield {"piece": piece}
    yield {"text": "".join(parts), "done": True}


__all__ = ["Route", "routes_of", "text_events"]
