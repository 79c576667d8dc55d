"""POST /v1/generate: a prompt continued by a language model, whole or as a stream of pieces."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from aiayn.serve.routes import Route, text_events
from aiayn.serve.routes.fields import Flag, Sampling, texts, whole
from aiayn.tasks import RequestError

MAX_NEW_TOKENS = 2000  # what one request may ask for
Prompt, NewTokens = texts(many=False, blank_ok=True), whole(1, MAX_NEW_TOKENS)


class GenerateRequest(Sampling):
    """`aiayn generate`'s options. One left out (None) takes the pipeline's own default, as the command's flags
    do; sampling's are checked by the pipeline's sampler before anything is generated."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"prompt": "the start of a text", "stream": True}]})

    prompt: Optional[Prompt] = None  # None: the pipeline's (a new line, a text's start)
    max_new_tokens: Optional[NewTokens] = None
    method: Optional[str] = None
    stream: Flag = False  # server-sent events: a piece of text at a time


class GenerateResponse(BaseModel):
    text: str


async def generate(pipeline, r: GenerateRequest, server):
    options = r.model_dump(exclude={"prompt", "stream"}, exclude_none=True)
    prompt = pipeline.prepare([r.prompt])[0]
    try:
        pipeline.sampler(**options)  # before a stream starts: a bad setting is a 422, not a broken stream
        pipeline.prompt_ids(prompt)
    except (TypeError, ValueError) as e:
        raise RequestError(str(e)) from None
    if r.stream:
        return text_events(server.stream(prompt, **options))
    return {"text": (await server.decode([prompt], **options))[0]}


ROUTES = (Route("POST", "/v1/generate", generate, "continue a prompt", GenerateRequest, GenerateResponse,
                texts=("prompt",), page=True),)  # the page shows the text grow
