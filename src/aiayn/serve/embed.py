"""POST /v1/embed: OpenAI's embeddings request and response over an `Embedder` (`aiayn.tasks.embed`), which
only computes. The request is a pydantic model, checked once here; the server's limits bound its texts."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from aiayn.tasks import RequestError, check_texts


class EmbedRequest(BaseModel):
    """{"input": a text or a list, "pooling": "mean" | "cls", "normalize": bool}; "model" and "encoding_format"
    as OpenAI's clients send them. A form's "true" reads as true (pydantic's lax mode)."""

    model_config = ConfigDict(extra="forbid")

    input: Union[str, list[str]]
    model: Optional[str] = None
    encoding_format: Literal["float"] = "float"
    pooling: Optional[Literal["mean", "cls"]] = None  # None: the model directory's (task.json)
    normalize: Optional[bool] = None


async def embed_route(pipeline, fields: dict, server) -> dict:
    """-> {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}."""
    try:
        request = EmbedRequest(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        raise RequestError(f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}") from None
    texts = check_texts(request.input, server.limits, "input")
    options = {k: v for k, v in (("pooling", request.pooling), ("normalize", request.normalize)) if v is not None}
    inputs = pipeline.prepare(texts)  # token ids, counted below as the model reads them
    vectors = await server.decode(inputs, **options)
    n_tokens = sum(len(ids) + 1 for ids in inputs)  # + [CLS]
    return {"object": "list", "model": request.model or pipeline.task,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
