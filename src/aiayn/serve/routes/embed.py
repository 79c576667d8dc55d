"""POST /v1/embed: OpenAI's embeddings request and response over an `Embedder` (`aiayn.tasks.embed`),
which only computes."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from aiayn.serve.routes import Route
from aiayn.serve.routes.fields import Body, Flag, Texts


class EmbedRequest(Body):
    """{"input": a text or a list, "pooling": "mean" | "cls", "normalize": bool}; "model" and "encoding_format"
    as OpenAI's clients send them."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"input": "a text to embed"}]})

    input: Texts
    model: Optional[str] = None
    encoding_format: Literal["float"] = "float"
    pooling: Optional[Literal["mean", "cls"]] = None  # None: the model directory's (task.json)
    normalize: Optional[Flag] = None


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float]


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbedResponse(BaseModel):
    object: Literal["list"]
    model: str
    data: list[Embedding]
    usage: Usage


async def embed(pipeline, r: EmbedRequest, server) -> dict:
    texts = [r.input] if isinstance(r.input, str) else list(r.input)
    options = {k: v for k, v in (("pooling", r.pooling), ("normalize", r.normalize)) if v is not None}
    inputs = pipeline.prepare(texts)  # token ids, counted below as the model reads them
    vectors = await server.decode(inputs, **options)
    n_tokens = sum(len(ids) + 1 for ids in inputs)  # + [CLS]
    return {"object": "list", "model": r.model or pipeline.task,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}


ROUTES = (Route("POST", "/v1/embed", embed, "embed texts: one vector per text (OpenAI's shape)", EmbedRequest,
                EmbedResponse, texts=("input",), page=True),)
