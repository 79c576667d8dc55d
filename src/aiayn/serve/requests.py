"""A request's fields, however they came (query, JSON body, form), read defensively: bounded JSON,
finite numbers, short error messages."""

import json
import math
import re
from typing import Any, Optional

import numpy as np

from aiayn.config import fits_64_bits
from aiayn.tasks import RequestError


class HTTPProblem(RequestError):
    """A `RequestError` with response headers (e.g. Retry-After)."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message, status)
        self.message, self.headers = message, headers or {}


MAX_JSON_DEPTH = 16  # brackets nested in a JSON body; a request here needs 4 (images: a list of rows of numbers)


async def request_fields(request, max_bytes: int) -> dict[str, Any]:
    """The fields of a request however they came: query parameters, then a JSON body or form
    fields on top. A list in a form or query comes as repeated fields. A body over `max_bytes` is
    refused (413) before it is parsed, and read no further than that."""
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request

    fields: dict[str, Any] = {}
    for key in request.query_params:
        values = request.query_params.getlist(key)
        fields[key] = values if len(values) > 1 else values[0]
    content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    try:
        if content_type == "application/json" or content_type.endswith("+json"):
            fields.update(parse_json_body(await bounded_body(request, max_bytes)))
        elif "form" in content_type:
            body = await bounded_body(request, max_bytes)

            async def replay():
                return {"type": "http.request", "body": body, "more_body": False}

            try:
                form = await Request(request.scope, replay).form()
            except HTTPException as e:  # starlette's for a bad multipart body (no boundary, say): our error shape
                raise HTTPProblem(400, f"malformed form body: {e.detail}") from None
            for key in form:
                values = form.getlist(key)
                fields[key] = values if len(values) > 1 else values[0]
    except ClientDisconnect:  # e.g. closed by the receive deadline: a 400 to nobody, and no traceback
        raise HTTPProblem(400, "the connection closed before the whole request arrived") from None
    return fields


async def bounded_body(request, max_bytes: int) -> bytes:
    """The request's body, or a 413 as soon as its Content-Length or the bytes received pass `max_bytes`."""
    too_large = HTTPProblem(413, f"the request body is over {max_bytes:,} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_body(body: bytes) -> dict:
    """A JSON object whose numbers are all finite (json.loads reads NaN, Infinity and 1e400 as floats
    that no check expects), whose integers fit in 64 bits, and whose brackets nest at most `MAX_JSON_DEPTH` deep (the depth is
    measured before parsing: 100,000 brackets would end json.loads in a RecursionError)."""
    depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise HTTPProblem(400, f"the JSON body nests {depth} brackets deep; at most {MAX_JSON_DEPTH}")
    try:
        parsed = json.loads(body or b"{}", parse_constant=_not_finite, parse_float=_finite_float,
                            parse_int=_bounded_int)
    except HTTPProblem:
        raise
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, an integer of over 4,300 digits
        raise HTTPProblem(400, f"malformed JSON body: {e}") from None
    if not isinstance(parsed, dict):
        raise HTTPProblem(422, "the JSON body must be an object")
    return parsed


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?')  # brackets inside strings do not nest; an unclosed one runs to the end (linear, not quadratic)
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[list(b"[{")], _BRACKET_STEP[list(b"]}")] = 1, -1
_BRACKET_STEP.flags.writeable = False  # a constant table


def json_depth(body: bytes) -> int:
    """How deep the brackets of a JSON text nest, outside its strings (0 for a bare value)."""
    steps = _BRACKET_STEP[np.frombuffer(_JSON_STRING.sub(b"", body), dtype=np.uint8)]  # a byte per byte
    steps = steps[steps != 0]  # the brackets alone
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _not_finite(name: str):
    raise HTTPProblem(422, f"{name} in the JSON body: numbers must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise HTTPProblem(422, f"{text[:20]} in the JSON body is too large: numbers must be finite")
    return value


def _bounded_int(text: str) -> int:
    """A JSON integer within 64 bits: no field takes more, and 10**400 would overflow every float check."""
    value = int(text)
    if not fits_64_bits(value):
        raise HTTPProblem(422, f"{text[:20]}... in the JSON body is too large: integers must fit in 64 bits")
    return value


MAX_ECHO = 200  # characters of a request's own text that an error message may repeat
MAX_ERRORS = 10  # validation errors listed in one answer


def shorten(message: str) -> str:
    """An error message cut to `MAX_ECHO` characters past its first hundred (which explain it), so a
    1 MB input never comes back as a 1 MB error; a float JSON cannot write is a string here too."""
    limit = 100 + MAX_ECHO
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate echoed: no 500
    return message if len(message) <= limit else f"{message[:limit]}... ({len(message) - limit} characters cut)"
