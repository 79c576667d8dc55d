"""Translation (§5-§6): parallel text in, sacreBLEU out, `Translator` for inference.

    data        a corpus (`aiayn.data`: a registered name, a {split}.{lang} directory, a TSV
                file) read and tokenized through `load_parallel`, whose cache `aiayn prepare`
                fills; or the built-in synthetic task. Source = ids + EOS, target BOS + y -> y + EOS.
    validation  greedy sacreBLEU on the validation text (`train.bleu`)
    test        beam search with `[decode]` (beam 4, α 0.6) on `data.test_split`: sacreBLEU
    inference   `TranslationPipeline`: `aiayn translate`, LibreTranslate's /translate and /languages,
                and /v1/translate (decoding options, n-best lists, attention)

Vocabulary, loss, batching and the test run are the shared ones of `aiayn.tasks.seq2seq`.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import torch

from aiayn.config import DECODE_METHODS
from aiayn.data.corpus import Side, stream_corpus
from aiayn.data.preprocess import ParallelDataset, load_parallel
from aiayn.tasks.pipeline import RequestError, Route, check_fields, check_texts, form_boolean, text_events
from aiayn.tasks.seq2seq import Examples, Seq2SeqTask, TextPipeline, refuse_one_file_for
from aiayn.tasks.settings import TextPairSettings, check, check_positive

__all__ = ["TranslationData", "TranslationTask", "TranslationPipeline"]


@dataclass(frozen=True)
class TranslationData(TextPairSettings):
    """corpus: "synthetic" (the built-in task `task`, see aiayn.data.synthetic), a registered
    corpus name ("multi30k", ...; looked up in `data_dir`, else downloaded), a directory of
    `{split}.{lang}[.gz]` files, or a TSV file (see aiayn.data.corpus.resolve_source)."""

    corpus: str = "synthetic"
    data_dir: str = ""  # local copy of a registered corpus; "" = $AIAYN_DATA_DIR or download
    # many-to-one training: more source languages line-aligned with the same targets (Multi30k's
    # fr and cs captions of the images its de and en describe), read for the training split and
    # the vocabulary only; validation and test read src_lang (Johnson et al., 2017, §3: many-to-one)
    extra_src_langs: tuple[str, ...] = ()
    # the synthetic corpus only
    task: str = "reverse"
    n_train: int = 20000
    n_valid: int = 200
    n_symbols: int = 10
    min_len: int = 3
    max_len: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "n_train", "n_valid", "n_symbols")
        check(1 <= self.min_len <= self.max_len, f"data: need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        check(self.src_lang != self.tgt_lang or self.corpus == "synthetic",
              f"data.src_lang and data.tgt_lang are both {self.src_lang!r}")
        object.__setattr__(self, "extra_src_langs", tuple(self.extra_src_langs))  # TOML gives a list
        extra = self.extra_src_langs
        check(not extra or (self.corpus != "synthetic" and len(set(extra)) == len(extra)
                            and not {self.src_lang, self.tgt_lang} & set(extra)),
              f"data.extra_src_langs must name distinct languages of the corpus other than {self.src_lang!r} "
              f"and {self.tgt_lang!r}, got {extra!r}")


class TranslationPipeline(TextPipeline):
    """`load_pipeline(DIR)` of a translation model; `pipeline.translate(texts, **options)`."""

    task, command, metric = "translation", "translate", "bleu"
    routes = (Route("POST", "/translate", "libretranslate", "LibreTranslate-compatible translation", texts=("q",)),
              Route("GET", "/languages", "languages", "the model's language pair, LibreTranslate style", False),
              Route("POST", "/v1/translate", "native", "translation with decoding options, scores and attention", texts=("text",),
                    example='{"text": ["a sentence to translate"], "source": "", "target": "", "return_attention": true}'))

    def translate(self, texts, **options) -> list:
        return self(texts, **options)

    def __call__(self, inputs, progress=None, target: str | None = None, **options) -> list:
        """Outputs for `inputs`; `target` names the language of a multilingual model's outputs (`targeted`)."""
        return self.run(self.targeted(self.prepare(inputs), target), progress=progress, **options)

    def directions(self) -> tuple[tuple[str, str], ...]:
        """task.json's "directions" (a multilingual model: one source, a tag per target), else its
        "languages" pair; () for a directory that names no languages (it takes any pair)."""
        if self.info.get("directions"):
            return tuple((s, t) for s, t in self.info["directions"])
        pair = self.info.get("languages")
        return ((pair[0], pair[1]),) if pair else ()

    def accepts(self, fields: dict) -> bool:
        return self.direction(fields) is not None

    def direction(self, fields: dict) -> tuple[str, str] | None:
        """The served pair that a request's `source` and `target` ask for ("auto", "" or absent: any)."""
        given = fields.get("source"), fields.get("target")
        if not self.directions():
            return ("", "")
        return next((pair for pair in self.directions()
                     if all(g in (None, "", "auto", want) for g, want in zip(given, pair))), None)

    def targets(self) -> list[str]:
        """The languages this model translates into (task.json's directions), in order."""
        return list(dict.fromkeys(t for _, t in self.directions()))

    def targeted(self, texts: list[str], target: str | None) -> list[str]:
        """What the model reads to translate `texts` into `target`. A multilingual model's sources start with
        the target's tag (task.json's "target_tag", e.g. "<2{}>": Johnson et al., 2017), one space before the
        text, as in training (the text's own edge white space goes: `input_tokens`). A target it does not
        serve is refused naming the served ones; so is a text whose own tag would override `target`, and,
        without `target`, an untagged text (it would come out in whichever language the model leans to).
        A model of one pair takes its own target or none."""
        served, tag = self.targets(), self.info.get("target_tag")
        if target and served and target not in served:
            raise ValueError(f"target {target!r}: this model translates into {', '.join(served)}")
        if not tag:
            return texts
        typed = re.compile(re.escape(tag).replace(re.escape("{}"), r"(\S+?)") + r"(?:\s|$)")
        out = []
        for i, text in enumerate(texts):
            found = typed.match(text.strip())
            if found and target:
                raise ValueError(f"text {i + 1} starts with the tag {found.group(0).strip()!r}, and the target is "
                                 f"{target!r}: name the target once (drop the tag from the text)")
            if found and found.group(1) not in served:
                raise ValueError(f"text {i + 1}: unknown target tag {found.group(0).strip()!r}; this model "
                                 f"translates into {', '.join(served)}")
            if not found and not target and text.strip():
                raise ValueError(f"this model translates into {', '.join(served)}: name the target (--target, "
                                 f"target=, or a tag such as {tag.format(served[0])!r} before the text)")
            out.append(text if found or not text.strip() else f"{tag.format(target)} {text.strip()}")
        return out

    def sources(self, fields: dict, texts: list[str], server) -> list[str]:
        """`texts` of a request for the pair its `source` and `target` ask for, tagged; a pair
        this model does not serve is a 400 that lists every pair the server does."""
        pair = self.direction(fields)
        if pair is None:
            served = ", ".join(f"{s} -> {t}" for s, t in server.directions) or "no named pair"
            raise RequestError(f"this server translates {served}; {fields.get('source') or 'auto'} -> "
                               f"{fields.get('target') or 'auto'} is not served", 400)
        try:
            return self.targeted(texts, pair[1])
        except ValueError as e:
            raise RequestError(str(e)) from None

    async def libretranslate(self, fields: dict, server) -> dict:
        """`q` (a string or a list), `source`, `target`, `format`, `alternatives` -> {"translatedText": ...},
        with "alternatives" (the next best translations, of a beam of at least alternatives + 1) when asked."""
        check_fields(fields, ["q", "source", "target", "format", "alternatives"])
        for name in ("source", "target"):
            if not isinstance(fields.get(name, ""), str):
                raise RequestError(f"{name} must be a language code")
        if fields.get("format", "text") != "text":
            raise RequestError(f"format must be 'text', got {fields.get('format')!r}")
        if "q" not in fields:
            raise RequestError("missing field q")
        n = fields.get("alternatives", 0)
        n = int(n) if isinstance(n, str) and n.isascii() and n.isdigit() and len(n) < 5 else n  # a form field is text
        most = server.limits.max_beam - 1
        if type(n) is not int or not 0 <= n <= most:
            raise RequestError(f"alternatives must be a whole number from 0 to {most}, got {n!r}")
        texts = self.sources(fields, check_texts(fields["q"], server.limits, "q"), server)
        one = (lambda xs: xs) if isinstance(fields["q"], list) else (lambda xs: xs[0])
        if not n:
            return {"translatedText": one(await server.decode(texts))}
        decode, _ = self.translator.settings({})
        beam = max(decode.beam_size if decode.method == "beam" else 1, n + 1)
        results = await server.decode(texts, method="beam", beam_size=beam, nbest=n + 1)
        return {"translatedText": one([r[0][0] for r in results]),
                "alternatives": one([[text for text, _ in r[1:]] for r in results])}

    async def languages(self, fields: dict, server) -> list:
        """Every language pair of the server, LibreTranslate style: one entry per source with its targets."""
        targets: dict[str, list[str]] = {}
        for source, target in server.directions:
            targets.setdefault(source, [])
            if target not in targets[source]:
                targets[source].append(target)
        return [{"code": s, "name": s, "targets": t} for s, t in targets.items()]

    async def native(self, fields: dict, server) -> dict:
        """{"text": [...], "method", "beam_size", "length_penalty", "max_len_b", "nbest",
        "no_repeat_ngram_size", "return_attention"} -> hypotheses with scores (and attention)."""
        r = NativeRequest.read(fields, server.limits)
        if r.return_attention and self.backend != "native":
            raise RequestError(f"return_attention: attention weights are not available with the {self.backend} backend", 400)
        options = r.decode_options()  # the fields given; the model's task.json decides the rest
        decode, _ = self._settings(options)
        beam = decode.beam_size if decode.method == "beam" else 1
        if r.nbest > beam:
            raise RequestError(f"nbest {r.nbest} needs beam search with beam_size >= {r.nbest}")
        texts = self.sources({"source": r.source, "target": r.target}, r.text, server)
        if r.stream:
            if beam > 1 or len(texts) > 1 or r.return_attention:
                raise RequestError("stream: one text, decoded with method greedy or sample, without attention", 400)
            return text_events(server.stream(texts[0], **options))
        results = await server.decode(texts, **options, nbest=r.nbest if beam > 1 else None,
                                      return_attention=r.return_attention)
        return {"translations": [_native_result(x) for x in results]}

    def _settings(self, options: dict):
        """The translator's settings with a request's `options`; fields each fine but not together (min_len
        with no_repeat_ngram_size 1 beyond the vocabulary) are the request's fault, a 422."""
        try:
            return self.translator.settings(options)
        except ValueError as e:
            raise RequestError(str(e)) from None

    def stream(self, source: str, **options) -> Iterator[str]:
        """The translation of one source (as `run` gives it with these options) in pieces of text as
        it is decoded: greedy search or sampling only (a beam's best changes until it ends)."""
        if self.backend != "native":
            raise RequestError(f"stream: not available with the {self.backend} backend", 400)
        from aiayn.decoding.common import encode_source
        from aiayn.decoding.streaming import stream_search, text_pieces

        tr = self.translator
        decode, sampling = self._settings(options)
        if decode.method == "beam" and decode.beam_size > 1:
            raise RequestError("stream: beam search has no output until it ends; use method greedy or sample", 400)
        from aiayn.decoding.translator import line_seed

        if not source.strip():  # as `run` translates a blank line: to nothing
            return iter(())
        src = torch.tensor([encode_source(tr.tokenizers.src, source, tr.max_input_tokens, tr.keep)], device=tr.device)
        seed = None if sampling.seed is None else line_seed(sampling.seed, 0)  # as `translate` seeds its first line
        return text_pieces(stream_search(tr.decoder, src, decode, sampling, seed), tr.tokenizers.tgt.decode)


@dataclass(frozen=True)
class NativeRequest:
    """The body of /v1/translate: only these fields, each bounded by the server's limits. A decoding
    field left out (None) keeps the model's own setting, as every other door does (task.json)."""

    text: list
    method: Optional[str] = None  # one of DECODE_METHODS
    beam_size: Optional[int] = None
    length_penalty: Optional[float] = None
    max_len_b: Optional[int] = None
    min_len: Optional[int] = None
    no_repeat_ngram_size: Optional[int] = None
    temperature: Optional[float] = None  # sampling's: `SamplingConfig` checks them (`TextTranslator.settings`)
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    seed: Optional[int] = None
    nbest: int = 1
    return_attention: bool = False
    source: str = ""  # a language pair the server translates ("": the model's own, or its first)
    target: str = ""
    stream: bool = False  # server-sent events: a piece of text at a time (greedy and sample only)

    @classmethod
    def read(cls, fields: dict, limits) -> "NativeRequest":
        import dataclasses
        import math

        names = [f.name for f in dataclasses.fields(cls)]
        check_fields(fields, names)
        if "text" not in fields:
            raise RequestError("missing field text")
        r = cls(**{k: v for k, v in fields.items() if k in names})
        if r.method is not None and r.method not in DECODE_METHODS:
            raise RequestError(f"method must be one of {', '.join(map(repr, DECODE_METHODS))}, got {r.method!r}")
        bounds = {"beam_size": (1, limits.max_beam), "nbest": (1, limits.max_beam), "max_len_b": (1, limits.max_len_b),
                  "min_len": (0, limits.max_len_b), "no_repeat_ngram_size": (0, limits.max_len_b)}
        for name, (low, high) in bounds.items():
            value = getattr(r, name)
            if value is not None and (type(value) is not int or not low <= value <= high):
                raise RequestError(f"{name} must be a whole number from {low} to {high}")
        lp = r.length_penalty
        if lp is not None and (type(lp) not in (int, float) or not (math.isfinite(lp) and 0 <= lp <= 2)):
            raise RequestError("length_penalty must be a number from 0 to 2")
        for name in ("return_attention", "stream"):
            value = form_boolean(getattr(r, name))
            if not isinstance(value, bool):
                raise RequestError(f"{name} must be true or false")
            r = dataclasses.replace(r, **{name: value})
        if not (isinstance(r.source, str) and isinstance(r.target, str)):
            raise RequestError("source and target must be language codes")
        if not isinstance(r.text, list):
            raise RequestError("text must be a non-empty list of strings")
        return dataclasses.replace(r, text=check_texts(r.text, limits, "text"))

    def decode_options(self) -> dict:
        """The decoding fields the request gave (a beam_size without a method: `TextTranslator.settings`)."""
        return {name: value for name in _DECODE_FIELDS if (value := getattr(self, name)) is not None}


_SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")
_DECODE_FIELDS = ("method", "beam_size", "length_penalty", "max_len_b", "min_len", "no_repeat_ngram_size",
                  *_SAMPLING_FIELDS)


def _native_result(result) -> dict:
    hyps, attention = result if isinstance(result, tuple) else (result, None)
    if isinstance(hyps, str):
        hyps = [(hyps, None)]
    out = {"text": hyps[0][0], "hypotheses": [{"text": t, "score": s} for t, s in hyps]}
    if attention is not None:
        out["attention"] = attention
    return out


class TranslationTask(Seq2SeqTask):
    name = "translation"
    metrics = ("bleu",)
    data_config = TranslationData
    pipeline = TranslationPipeline

    def examples(self, split: str) -> Examples:
        if self.data.corpus == "synthetic":
            return synthetic_text(self.data, split, self.cfg.train.seed)
        return self.read_pairs(split, self.data.data_dir)

    def load(self, split: str) -> ParallelDataset:
        """Token ids of `split`: through `load_parallel` and its cache, or the synthetic task's pairs."""
        data = self.data
        if data.corpus == "synthetic":
            ex = self.examples(split)
            return ParallelDataset.from_corpus(list(zip(ex.src, ex.tgt)), self.tokenizers)
        ids = ParallelDataset.concat([
            load_parallel(data.corpus, self.tokenizers, split=split, langs=(source, data.tgt_lang),
                          data_dir=data.data_dir or None) for source in self.source_langs(split)])
        self.drops.note(split, "empty", ids.stats.n_empty, ids.stats.n_read, "pairs with an empty side")
        return ids

    def source_langs(self, split: str) -> tuple[str, ...]:
        """The source languages read for `split`: with data.extra_src_langs, those too in training."""
        data = self.data
        return (data.src_lang, *data.extra_src_langs) if split == data.train_split else (data.src_lang,)

    def train_texts(self) -> tuple[Iterable[str], Iterable[str]]:
        """The training text to build a vocabulary from: every source language's, and the targets, read
        from the files as the vocabulary's training goes (a WMT-sized corpus is never held as text)."""
        data = self.data
        if data.corpus == "synthetic":
            return super().train_texts()
        streams = [stream_corpus(data.corpus, data.train_split, (lang, data.tgt_lang), data.data_dir or None)
                   for lang in self.source_langs(data.train_split)]
        return Side(tuple(streams), 0), Side(tuple(streams[:1]), 1)

    def check_test_split(self) -> None:
        """The test split's files exist (found without reading them), and a corpus of one TSV file (one
        split: it would be read again for every split) is not asked for validation or test pairs."""
        data = self.data
        if data.corpus == "synthetic":
            return
        from aiayn.data.corpus import resolve_source

        langs = (data.src_lang, data.tgt_lang)
        refuse_one_file_for(data, [name for name in ("valid_split", "test_split") if getattr(data, name)], data.data_dir)
        if data.test_split:
            resolve_source(data.corpus, data.test_split, langs, data.data_dir or None)

    def task_info(self) -> dict:
        return {"languages": [self.data.src_lang, self.data.tgt_lang]}

    def scores(self, hyps: list[str], examples: Examples) -> dict[str, float]:
        from aiayn import metrics

        return {"bleu": metrics.bleu(hyps, examples.tgt).score}

    def report(self, hyps: list[str], examples: Examples) -> dict:
        from aiayn import metrics

        score = metrics.bleu(hyps, examples.tgt)
        return {"bleu": score.score, "detail": score.detail, "signature": score.signature}


def synthetic_text(data: TranslationData, split: str, seed: int) -> Examples:
    """The synthetic task's pairs of `split`: train seed, valid seed + 1, test seed + 2."""
    from aiayn.data.synthetic import synthetic_pairs

    n, offset = (data.n_train, 0) if split == data.train_split else (data.n_valid, 1 if split == data.valid_split else 2)
    pairs = synthetic_pairs(data.task, n, seed=seed + offset, n_symbols=data.n_symbols,
                            min_len=data.min_len, max_len=data.max_len)
    return Examples([s for s, _ in pairs], [[t] for _, t in pairs])
