"""POST /v1/classify: texts, or images (pixel rows in [0, 1]), in; a label and its probability each."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo
from pydantic_core import PydanticCustomError

from aiayn.serve.routes import Route
from aiayn.serve.routes.fields import Body, Texts, limits_of


class ClassifyRequest(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "a text to classify"}]})

    text: Texts


class Label(BaseModel):
    label: str
    probability: float


class ClassifyResponse(BaseModel):
    labels: list[Label]


async def classify(pipeline, r: ClassifyRequest, server) -> dict:
    texts = [r.text] if isinstance(r.text, str) else list(r.text)
    return {"labels": [{"label": label, "probability": p} for label, p in await server.decode(pipeline.prepare(texts))]}


def _images(value: Any, info: ValidationInfo) -> list:
    """One image (pixel rows) or a list of images -> a list of images, at most the server's `max_texts`. The
    pixels themselves are the pipeline's to check (`ImageClassifier.prepare`)."""
    grid = isinstance(value, list) and bool(value) and isinstance(value[0], list)
    images = value if grid and value[0] and isinstance(value[0][0], list) else [value]
    most = limits_of(info).max_texts
    if len(images) > most:
        raise PydanticCustomError("too_many", "{n} images in one request; at most {most}", {"n": len(images), "most": most})
    return images


Images = Annotated[list[Any], BeforeValidator(_images)]  # (rows of pixels) or a list of them


class ImageClassifyRequest(Body):
    """`image`: pixel rows in [0, 1], or a list of such images, all of one size."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"image": [[0.0, 0.5], [1.0, 0.25]]}]})

    image: Images


async def classify_images(pipeline, r: ImageClassifyRequest, server) -> dict:
    return {"labels": [{"label": label, "probability": p} for label, p in await server.decode(pipeline.prepare(r.image))]}


ROUTES = (Route("POST", "/v1/classify", classify, "classify texts", ClassifyRequest, ClassifyResponse,
                texts=("text",), page=True),)
IMAGE_ROUTES = (Route("POST", "/v1/classify", classify_images, "classify images (pixel rows in [0, 1])",
                      ImageClassifyRequest, ClassifyResponse, page=True),)
