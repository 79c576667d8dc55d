"""Translation over HTTP: LibreTranslate's POST /translate and GET /languages (its wire format), and the
native POST /v1/translate (decoding options, n-best lists, attention, streaming).

Several translation directories share these routes: a request goes to the one whose language pairs hold
its `source` and `target` (`accepts`); a pair none serves is a 400 that lists every pair of the server."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

from aiayn.config import DECODE_METHODS
from aiayn.serve.routes import Route, text_events
from aiayn.serve.routes.fields import Body, Flag, Sampling, Texts, TextList, number, whole
from aiayn.tasks import RequestError

# -- choosing the directory -----------------------------------------------------------------------------


def direction(pipeline, source, target) -> tuple[str, str] | None:
    """The pair of `pipeline` that `source` and `target` ask for ("auto", "" or None: any); ("", "") for a
    model that names no languages (it takes any pair); None when it serves no such pair."""
    if not pipeline.directions():
        return ("", "")
    return next((pair for pair in pipeline.directions()
                 if all(g in (None, "", "auto", want) for g, want in zip((source, target), pair))), None)


def accepts(pipeline, fields: dict) -> bool:
    return direction(pipeline, fields.get("source"), fields.get("target")) is not None


def sources(pipeline, texts: list[str], source: str, target: str, server) -> list[str]:
    """`texts` as the model reads them for the asked pair (a multilingual model's target tag in front); a pair
    this model does not serve is a 400 that lists every pair the server does."""
    pair = direction(pipeline, source, target)
    if pair is None:
        served = ", ".join(f"{s} -> {t}" for s, t in server.directions) or "no named pair"
        raise RequestError(f"this server translates {served}; {source or 'auto'} -> {target or 'auto'} is not served", 400)
    try:
        return pipeline.targeted(texts, pair[1])
    except ValueError as e:
        raise RequestError(str(e)) from None


def settings(pipeline, options: dict, nbest: int | None = None):
    """The translator's settings with a request's `options`; fields each fine but not together (min_len
    with no_repeat_ngram_size 1 beyond the vocabulary, an nbest over the beam) are the request's fault, a 422."""
    try:
        return pipeline.translator.settings(options, nbest)
    except ValueError as e:
        raise RequestError(str(e)) from None


Alternatives = whole(0, lambda limits: limits.max_beam - 1, about="at most the server's --max-beam minus 1")
Beam = whole(1, lambda limits: limits.max_beam, about="at most the server's --max-beam")
Length = whole(1, lambda limits: limits.max_len_b, about="at most the server's --max-len-b")
Count = whole(0, lambda limits: limits.max_len_b, about="at most the server's --max-len-b")
Penalty = number(0, 2)


# -- LibreTranslate ---------------------------------------------------------------------------------------
class LibreTranslateRequest(Body):
    """LibreTranslate's body: `q` a text or a list, `alternatives` the next best translations wanted."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"q": "ein Hund", "source": "de", "target": "en"}]})

    q: Texts
    source: str = "auto"
    target: str = ""
    format: Literal["text"] = "text"
    alternatives: Alternatives = 0


class LibreTranslateResponse(BaseModel):
    translatedText: Union[str, list[str]]
    alternatives: Optional[Union[list[str], list[list[str]]]] = None


async def libretranslate(pipeline, r: LibreTranslateRequest, server) -> dict:
    """{"translatedText": ...}, with "alternatives" (the next best translations, of a beam of at least
    alternatives + 1) when asked."""
    texts = sources(pipeline, [r.q] if isinstance(r.q, str) else list(r.q), r.source, r.target, server)
    one = (lambda xs: xs[0]) if isinstance(r.q, str) else (lambda xs: xs)
    if not r.alternatives:
        return {"translatedText": one(await server.decode(texts))}
    decode, _ = pipeline.translator.settings({})
    beam = max(decode.beam_size if decode.method == "beam" else 1, r.alternatives + 1)
    results = await server.decode(texts, method="beam", beam_size=beam, nbest=r.alternatives + 1)
    return {"translatedText": one([x[0][0] for x in results]),
            "alternatives": one([[text for text, _ in x[1:]] for x in results])}


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


async def languages(pipeline, body: None, server) -> list:
    """Every language pair of the server, LibreTranslate style: one entry per source with its targets."""
    targets: dict[str, list[str]] = {}
    for source, target in server.directions:
        targets.setdefault(source, [])
        if target not in targets[source]:
            targets[source].append(target)
    return [{"code": s, "name": s, "targets": t} for s, t in targets.items()]


# -- native -----------------------------------------------------------------------------------------------
class TranslateRequest(Sampling):
    """The body of /v1/translate. A decoding field left out keeps the model's own setting (task.json), as
    every other door does; sampling's fields are checked by `SamplingConfig` (`TextTranslator.settings`)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"text": ["a sentence to translate"], "source": "", "target": "", "return_attention": True}]})

    text: TextList
    method: Optional[Literal[DECODE_METHODS]] = None
    beam_size: Optional[Beam] = None
    length_penalty: Optional[Penalty] = None
    max_len_b: Optional[Length] = None
    min_len: Optional[Count] = None
    no_repeat_ngram_size: Optional[Count] = None
    nbest: Beam = 1
    return_attention: Flag = False
    source: str = ""  # a language pair the server translates ("": the model's own, or its first)
    target: str = ""
    stream: Flag = False  # server-sent events: a piece of text at a time (greedy and sample only)

    def decode_options(self) -> dict:
        """The decoding fields the request gave (a beam_size without a method: `TextTranslator.settings`)."""
        return {name: value for name in DECODE_FIELDS if (value := getattr(self, name)) is not None}


DECODE_FIELDS = ("method", "beam_size", "length_penalty", "max_len_b", "min_len", "no_repeat_ngram_size",
                 "temperature", "top_k", "top_p", "seed")


class Hypothesis(BaseModel):
    text: str
    score: Optional[float] = None


class Translation(BaseModel):
    text: str
    hypotheses: list[Hypothesis]
    attention: Optional[dict] = None  # {"weights": layers x heads x target x source, "source", "target"}


class TranslateResponse(BaseModel):
    translations: list[Translation]


async def translate(pipeline, r: TranslateRequest, server):
    """Hypotheses with scores (and attention), or a stream of pieces of text."""
    if r.return_attention and pipeline.backend != "native":
        raise RequestError(f"return_attention: attention weights are not available with the {pipeline.backend} backend", 400)
    options = r.decode_options()
    decode, _ = settings(pipeline, options, r.nbest if r.nbest > 1 else None)
    beam = decode.beam_size if decode.method == "beam" else 1
    texts = sources(pipeline, list(r.text), r.source, r.target, server)
    if r.stream:
        if beam > 1 or len(texts) > 1 or r.return_attention:
            raise RequestError("stream: one text, decoded with method greedy or sample, without attention", 400)
        return text_events(server.stream(texts[0], **options))
    results = await server.decode(texts, **options, nbest=r.nbest if beam > 1 else None, return_attention=r.return_attention)
    return {"translations": [translation(x) for x in results]}


def translation(result) -> dict:
    hyps, attention = result if isinstance(result, tuple) else (result, None)
    if isinstance(hyps, str):
        hyps = [(hyps, None)]
    out = {"text": hyps[0][0], "hypotheses": [{"text": t, "score": s} for t, s in hyps]}
    if attention is not None:
        out["attention"] = attention
    return out


ROUTES = (
    Route("POST", "/translate", libretranslate, "LibreTranslate-compatible translation", LibreTranslateRequest,
          LibreTranslateResponse, texts=("q",), accepts=accepts),
    Route("GET", "/languages", languages, "the server's language pairs, LibreTranslate style", None, list[Language],
          runs_model=False, accepts=accepts),
    Route("POST", "/v1/translate", translate, "translation with decoding options, scores and attention",
          TranslateRequest, TranslateResponse, texts=("text",), page=True, accepts=accepts),
)
