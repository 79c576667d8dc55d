"""The one validation layer of the HTTP edge. A request body is a pydantic model (`Body`) whose fields use
the types below; `validate` reads a request's fields into it with the server's limits, and turns a
failed validation into one `RequestError` that names the field (413 for too much text, 422 else).

The JSON reader (`serve.requests`) has already refused what no model could take: bodies over the size
limit, brackets nested too deep, numbers that are not finite or not within 64 bits. Form and query
fields arrive as text, so the models read "3" as 3 and "true" as true (pydantic's lax mode)."""

from __future__ import annotations

from typing import Annotated, Any, Callable, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from aiayn.config import fits_64_bits
from aiayn.serve.limits import ServeLimits
from aiayn.tasks import RequestError

TOO_MUCH = ("too_many", "too_long")  # the error types answered with 413 rather than 422
OWN = ("texts_type", "empty", *TOO_MUCH, "unicode", "number", "flag", "refused")  # our errors: their messages as raised


class Body(BaseModel):
    """A request body: the declared fields only, finite numbers, read-only."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def limits_of(info: ValidationInfo) -> ServeLimits:
    return (info.context or {}).get("limits") or ServeLimits()


# -- texts ------------------------------------------------------------------------------------------
def _texts(value: Any, info: ValidationInfo, one: bool, many: bool, blank_ok: bool) -> Any:
    """A text (`one`) or a non-empty list of texts (`many`) within the server's limits; all blank is refused
    unless `blank_ok` (a language model's prompt: a new line starts a text)."""
    field, limits = info.field_name, limits_of(info)
    is_list = isinstance(value, list) and bool(value) and all(isinstance(t, str) for t in value)
    if not ((one and isinstance(value, str)) or (many and is_list)):
        kind = {(True, True): "a non-empty string or a non-empty list of strings", (True, False): "a string",
                (False, True): "a non-empty list of strings"}[one, many]
        raise PydanticCustomError("texts_type", "{field} must be {kind}", {"field": field, "kind": kind})
    items = [value] if isinstance(value, str) else value
    if not blank_ok and not any(t.strip() for t in items):
        raise PydanticCustomError("empty", "{field} is empty", {"field": field})
    if len(items) > limits.max_texts:
        raise PydanticCustomError("too_many", "{n} texts in one request; at most {most}",
                                  {"n": len(items), "most": limits.max_texts})
    longest = max(len(t) for t in items)
    if longest > limits.max_chars:
        raise PydanticCustomError("too_long", "a text of {n} characters; at most {most}",
                                  {"n": longest, "most": limits.max_chars})
    for i, text in enumerate(items):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON lets a string hold "\ud800": no character, no tokenizer takes it
            where = field if isinstance(value, str) else f"{field}[{i}]"
            raise PydanticCustomError("unicode", "{where}: not valid Unicode (a lone surrogate at character {at})",
                                      {"where": where, "at": e.start}) from None
    return value


def texts(one: bool = True, many: bool = True, blank_ok: bool = False):
    """The type of a field of texts: `Union[str, list[str]]`, `str` or `list[str]` as `one` and `many` say."""
    kind = Union[str, list[str]] if one and many else (str if one else list[str])
    return Annotated[kind, BeforeValidator(lambda v, info: _texts(v, info, one, many, blank_ok))]


Texts = texts()
TextList = texts(one=False)


# -- numbers -----------------------------------------------------------------------------------------
Bound = Union[int, float, Callable[[ServeLimits], Any], None]


def _number(value: Any, info: ValidationInfo, whole: bool, low: Bound, high: Bound) -> Any:
    """A whole number (not true/false, not 1.5; "3" from a form) or any finite number, within [low, high];
    a bound may be a function of the server's limits (`--max-beam`)."""
    limits = limits_of(info)
    low, high = (b(limits) if callable(b) else b for b in (low, high))
    kind = "a whole number" if whole else "a number"
    span = (f" from {low:g} to {high:g}" if low is not None and high is not None else
            f" of at least {low:g}" if low is not None else f" of at most {high:g}" if high is not None else "")
    wrong = PydanticCustomError("number", "{field} must be {kind}{span}", {"field": info.field_name, "kind": kind, "span": span})
    if isinstance(value, str) and value.strip().lstrip("+-").isascii():  # a form's text; "²" isdigit() but is no number
        try:
            value = int(value) if whole else float(value)
        except ValueError:
            raise wrong from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        raise wrong
    if value != value or (low is not None and value < low) or (high is not None and value > high):
        raise wrong
    if whole and not fits_64_bits(value):  # as the JSON reader bounds it: a form's text too
        raise wrong
    return value


def number(low: Bound = None, high: Bound = None, whole: bool = False, about: str = ""):
    """The type of a numeric field; `about` describes a bound that depends on the server (OpenAPI)."""
    schema = {k: v for k, v in (("minimum", low), ("maximum", high)) if isinstance(v, (int, float))}
    return Annotated[int if whole else float,
                     BeforeValidator(lambda v, info: _number(v, info, whole, low, high)),
                     Field(json_schema_extra={**schema, **({"description": about} if about else {})})]


def whole(low: Bound = None, high: Bound = None, about: str = ""):
    return number(low, high, whole=True, about=about)


Whole, Number = whole(), number()


def _flag(value: Any, info: ValidationInfo) -> Any:
    """true or false; a form's text "true" or "false" too (not pydantic's "yes", "on" or 1)."""
    value = {"true": True, "false": False}.get(value.lower(), value) if isinstance(value, str) else value
    if not isinstance(value, bool):
        raise PydanticCustomError("flag", "{field} must be true or false", {"field": info.field_name})
    return value


Flag = Annotated[bool, BeforeValidator(_flag)]


class Sampling(Body):
    """Sampling's fields, as every route that samples names them; one left out (None) keeps the model's own
    setting. `config.SamplingConfig` checks the values where they are used."""

    temperature: Optional[Number] = None
    top_k: Optional[Whole] = None
    top_p: Optional[Number] = None
    seed: Optional[Whole] = None


# -- validation ---------------------------------------------------------------------------------------
def validate(model: type[Body], fields: dict, limits: ServeLimits) -> Body:
    """`fields` as a `model`, or the one `RequestError` that says what is wrong first: unknown fields, then
    missing ones, then the first bad value."""
    try:
        return model.model_validate(fields, context={"limits": limits})
    except ValidationError as e:
        raise refusal(e, model) from None


def refusal(e: ValidationError, model: type[Body]) -> RequestError:
    errors = e.errors(include_url=False)
    unknown = [str(x["loc"][0]) for x in errors if x["type"] == "extra_forbidden"]
    if unknown:
        return RequestError(f"unknown field(s) {', '.join(sorted(unknown))}; this route takes {', '.join(model.model_fields)}")
    missing = [str(x["loc"][0]) for x in errors if x["type"] == "missing"]
    if missing:
        return RequestError(f"missing field {', '.join(missing)}")
    first = errors[0]
    return RequestError(message(first), 413 if first["type"] in TOO_MUCH else 422)


KINDS = {"int": "a whole number", "float": "a number", "finite": "a finite number", "bool": "true or false",
         "string": "a string", "list": "a list", "dict": "an object"}


def message(error: dict) -> str:
    """One error of pydantic's in our words: a custom one as its own message says, a type error as
    "{field} must be {kind}"."""
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".") or "body"
    if error["type"] in OWN:
        return error["msg"]
    if error["type"] == "literal_error":
        return f"{where} must be {error['ctx']['expected']}"
    kind = KINDS.get(error["type"].split("_")[0])
    return f"{where} must be {kind}" if kind else f"{where}: {error['msg']}"


def refused(text: str) -> PydanticCustomError:
    """A refusal a model's own check raises (a pair of fields that do not go together)."""
    return PydanticCustomError("refused", "{text}", {"text": text})
