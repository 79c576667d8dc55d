"""POST /v1/summarize: texts in, one summary each."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from aiayn.serve.routes import Route
from aiayn.serve.routes.fields import Body, Texts


class SummarizeRequest(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "a text to summarize"}]})

    text: Texts


class SummarizeResponse(BaseModel):
    summaries: list[str]


async def summarize(pipeline, r: SummarizeRequest, server) -> dict:
    texts = [r.text] if isinstance(r.text, str) else list(r.text)
    return {"summaries": await server.decode(pipeline.prepare(texts))}


ROUTES = (Route("POST", "/v1/summarize", summarize, "summarize texts", SummarizeRequest, SummarizeResponse,
                texts=("text",), page=True),)
