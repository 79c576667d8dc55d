"""`Translator`: text in, text out, for a model directory holding config.json,
model.safetensors and the tokenizer files (`aiayn.data.tokenizer.save_tokenizers`).

Sources are encoded as token ids + EOS (`aiayn.decoding.encode_source`, the convention
the trainer follows). Sentences are sorted by length, packed into batches of at most
`batch_tokens` padded source tokens, decoded, and returned in input order. Blank lines
are not decoded: they translate to "" so output stays aligned with input.

The Translator builds the model's fastest decodable view once (`interface.for_inference`);
call `refresh()` after changing the weights. Every `translate` call keeps its decoding
state to itself, so one Translator may serve several threads at once.

Seeded sampling draws each sentence from its own generator, seeded from (seed, line number)
(`line_seed`), so a sentence's sample depends on neither its batch nor how the input was cut
into `translate` calls (`first_index`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from aiayn.config import DEFAULT_BATCH_TOKENS, PAD_ID, DecodeConfig, SamplingConfig, check_sampling_use
from aiayn.data.tokenizer import load_tokenizers
from aiayn.decoding.beam import beam_search
from aiayn.decoding.common import input_tokens, pad_sources, source_ids
from aiayn.decoding.continuous import ContinuousBeamSearch
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.interface import for_inference
from aiayn.decoding.sampling import sample
from aiayn.model_dir import existing
from aiayn.models import load_model
from aiayn.runtime import stable_hash

log = logging.getLogger(__name__)

NBest = list[tuple[str, float]]
_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingConfig))


class TextTranslator:
    """What every backend shares: text in, text out. Sources are encoded and cut (`_encode`), the
    decoding settings merged with per-call overrides (`settings`), and a subclass decodes them in
    batches (`_decode_batches`).

    `decode` and `sampling` hold the defaults that `translate` keyword arguments override;
    `max_input_tokens` cuts over-long sources, keeping their "start" or "end" (`keep`)."""

    def __init__(self, tokenizers, decode: DecodeConfig | None, sampling: SamplingConfig | None,
                 max_input_tokens: int, batch_tokens: int, keep: str):
        for name, value in (("max_input_tokens", max_input_tokens), ("batch_tokens", batch_tokens)):
            if value is not None and (type(value) is not int or value < 2):  # a token and the EOS
                raise ValueError(f"{name} must be a whole number of at least 2, got {value!r}")
        self.tokenizers = tokenizers
        self.decode = decode or DecodeConfig()
        self.sampling = sampling or SamplingConfig()
        self.max_input_tokens = max_input_tokens
        self.batch_tokens = batch_tokens
        self.keep = keep  # which end of an over-long source survives (see encode_source)

    def translate(self, sentences: Sequence[str], *, nbest: int | None = None, first_index: int = 0,
                  progress: Callable[[int], None] | None = None, **overrides) -> list[str] | list[NBest]:
        """Translate `sentences`, keeping their order.

        Returns one string per sentence, or, when `nbest` is given, a list of up to
        `nbest` (text, score) pairs per sentence, best first (score: length-normalised
        log-probability; ("", 0.0) for a blank line). `nbest` needs beam search with
        beam_size >= max(nbest, 2): greedy and sampled outputs have no scored n-best list.
        `overrides` are `DecodeConfig` fields (method, beam_size, length_penalty, ...) and
        `SamplingConfig` fields (temperature, top_k, top_p, seed); None leaves a field as it is.
        `first_index` is the line number of `sentences[0]` in the whole input: a seeded
        sample depends only on the seed and the line number.
        `progress(n)` is called after each batch with the number of sentences it held.
        """
        decode, sampling = self.settings(overrides, nbest)
        results: list[NBest] = [[("", 0.0)] for _ in sentences]
        sources = self._encode(sentences, first_index)
        if progress is not None and len(sources) < len(sentences):
            progress(len(sentences) - len(sources))  # blank lines are done already
        for batch, found in self._decode_batches(sources, decode, sampling, first_index):
            for i, hyps in zip(batch, found):
                results[i] = self._texts(hyps)
            if progress is not None:
                progress(len(batch))
        return _as_returned(results, nbest is not None)

    def continuous(self, *, nbest: int | None = None, **overrides) -> "ContinuousTranslation | None":
        """A continuous-batching session with these settings, or None where a backend has none."""
        return None

    def _texts(self, hyps) -> NBest:
        """(token ids, score) pairs -> (text, score) pairs."""
        return [(self.tokenizers.tgt.decode(tokens), score) for tokens, score in hyps]

    def _decode_batches(self, sources: dict[int, list[int]], decode: DecodeConfig, sampling: SamplingConfig,
                        first_index: int) -> Iterator[tuple[list[int], list[list[tuple[list[int], float]]]]]:
        """(indices of a batch, per index its (token ids, score) list, best first), batch by batch."""
        raise NotImplementedError

    def _encode(self, sentences: Sequence[str], first_index: int = 0) -> dict[int, list[int]]:
        """Index -> source ids + EOS of each non-blank sentence, cut to `max_input_tokens` at the
        `keep` end; one warning per call counts the sources that were cut, naming the first by its
        line in the whole input (`first_index`: the line of sentences[0], a chunk of stdin's)."""
        limit = self.max_input_tokens
        ids = {i: input_tokens(self.tokenizers.src, s) for i, s in enumerate(sentences) if s.strip()}
        cut = [i for i, x in ids.items() if limit is not None and len(x) + 1 > limit]
        if cut:
            log.warning("%d of %d sources truncated to %d tokens (the %s kept), e.g. line %d: %.40r...", len(cut),
                        len(ids), limit, "beginning" if self.keep == "start" else "end", first_index + cut[0] + 1,
                        sentences[cut[0]])
        return {i: source_ids(x, limit, self.keep) for i, x in ids.items()}

    def settings(self, overrides: dict, nbest: int | None = None) -> tuple[DecodeConfig, SamplingConfig]:
        """The decoding and sampling settings of a call: the defaults with `overrides` (None keeps a field).
        A beam_size given without a method asks for beam search, whatever the default method (as
        fairseq's --beam and Hugging Face's num_beams do): the CLI, Python and HTTP read it alike."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "beam_size" in given:
            given.setdefault("method", "beam")
        sampling = {k: given.pop(k) for k in list(given) if k in _SAMPLING_FIELDS}
        decode = dataclasses.replace(self.decode, **given)
        check_sampling_use(decode.method, sampling)  # not silently ignored
        words = self.tokenizers.tgt.vocab_size - 3  # all but PAD, BOS and EOS
        if decode.no_repeat_ngram_size == 1 and decode.min_len > words:
            raise ValueError(f"min_len {decode.min_len} cannot be met with no_repeat_ngram_size 1: the target vocabulary "
                             f"has {words} tokens besides PAD, BOS and EOS, each used at most once")
        if nbest is not None:
            if decode.method != "beam" or decode.beam_size < max(nbest, 2):
                raise ValueError(f"nbest {nbest} needs beam search with beam_size >= {max(nbest, 2)}, got method "
                                 f"{decode.method!r} with beam_size {decode.beam_size}: greedy search (beam size 1) "
                                 "and sampling give one unscored output")
            decode = dataclasses.replace(decode, nbest=nbest)
        return decode, dataclasses.replace(self.sampling, **sampling)


def arithmetic(precision: str | None, quantize: str | None) -> str:
    """The decoder's arithmetic: "int8" with `quantize`, else `precision`. A precision beside int8 other than
    the default would be dropped without a word: it is refused (int8 weights compute in int8 whatever it says)."""
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be 'int8' or None, got {quantize!r}")
    if quantize and precision not in (None, "fp32", "auto"):
        raise ValueError(f"precision {precision!r} and quantize 'int8' do not go together: int8 weights compute in "
                         "int8; give one of them")
    return quantize or precision or "fp32"


class Translator(TextTranslator):
    """Translate with a trained encoder-decoder and its tokenizers.

    `decode` and `sampling` hold the default settings (`DecodeConfig()`: beam 4, GNMT
    α = 0.6, |src| + 50; `SamplingConfig()`); `translate` keyword arguments override them per call.
    `precision` ("fp32", "bf16" or "auto": bf16 where the device has it natively) and `quantize="int8"`
    (int8 weights and activations on the CPU) choose the arithmetic of the decoder
    (`interface.for_inference`); the default is the model's own fp32.
    """

    def __init__(self, model, tokenizers, decode: DecodeConfig | None = None, sampling: SamplingConfig | None = None,
                 max_input_tokens: int | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                 keep: str = "start", precision: str = "fp32", quantize: str | None = None):
        if not hasattr(model, "max_input_length"):  # one stack (GPT, BERT): no source to translate from
            raise ValueError(f"a {model.model_type} model does not translate: a Translator needs an encoder-decoder "
                             "(a model directory without task.json is read as a translation model)")
        limit = model.max_input_length if max_input_tokens is None else max_input_tokens
        super().__init__(tokenizers, decode, sampling, limit, batch_tokens, keep)
        self.model = model.eval()
        self.device = next(model.parameters()).device
        check_vocab(model.config, tokenizers)
        self.precision = arithmetic(precision, quantize)
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the inference view of the model: call after its weights change. In int8 the view holds
        int8 copies of every weight it reads, and the Translator lets the fp32 model go (its memory is
        then about a quarter of the model's): nothing is left to refresh from."""
        if self.model is None:
            raise ValueError("an int8 Translator keeps only its int8 weights: make a new one from the changed model")
        self.decoder = for_inference(self.model, self.precision)
        if self.precision == "int8":
            self.model = None

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu", **kwargs) -> "Translator":
        """Load config, weights and tokenizers from one directory. Errors name the bad path."""
        model_dir = existing(model_dir)
        return cls(load_model(model_dir, device=device), load_tokenizers(model_dir), **kwargs)

    def continuous(self, *, nbest: int | None = None, **overrides) -> "ContinuousTranslation | None":
        """A continuous-batching session with these settings (`aiayn.decoding.continuous`), or None
        where it does not apply: greedy search, sampling, or a model without a ragged step."""
        decode, _ = self.settings(overrides, nbest)
        if decode.method != "beam" or decode.beam_size < 2 or not getattr(self.decoder, "ragged_steps", False):
            return None
        return ContinuousTranslation(self, decode, nbest is not None)

    def _decode_batches(self, sources, decode, sampling, first_index):
        for batch in self._batches(sources):
            src = pad_sources([sources[i] for i in batch], PAD_ID, self.device)
            yield batch, self._search(src, decode, sampling, [first_index + i for i in batch])

    def _search(self, src, decode: DecodeConfig, sampling: SamplingConfig, lines: list[int]):
        """-> per row, a list of (token ids, score). `lines`: each row's line number, for seeding."""
        constraints = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=decode.min_len,
                           no_repeat_ngram_size=decode.no_repeat_ngram_size)
        if decode.method == "sample":
            generators = None if sampling.seed is None else [
                torch.Generator(device=self.device).manual_seed(line_seed(sampling.seed, i)) for i in lines]
            outs = sample(self.decoder, src, sampling, generators=generators, **constraints)
        elif decode.method == "greedy" or decode.beam_size == 1:
            outs = greedy_search(self.decoder, src, **constraints)
        else:
            return [[(h.tokens, h.score) for h in hyps] for hyps in beam_search(self.decoder, src, decode)]
        return [[(tokens, 0.0)] for tokens in outs]

    def _batches(self, sources: dict[int, list[int]]) -> Iterator[list[int]]:
        """Indices sorted longest first, packed so that rows · longest <= batch_tokens."""
        order = sorted(sources, key=lambda i: -len(sources[i]))
        batch: list[int] = []
        for i in order:
            if batch and (len(batch) + 1) * len(sources[batch[0]]) > self.batch_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch


class ContinuousTranslation:
    """Requests of texts join a running beam search (`ContinuousBeamSearch`) and come back when
    all their texts have ended: what `translate` returns for them, sentence for sentence.

        session.add(request, texts)       # any hashable request key; between steps
        for request, results in session.step(): ...
        session.cancel(request)           # its texts leave the search; it is never answered
    """

    def __init__(self, translator: Translator, decode: DecodeConfig, nbest: bool):
        self.translator, self.nbest = translator, nbest
        self.search = ContinuousBeamSearch(translator.decoder, decode, translator.device)
        self.results: dict = {}  # request -> one n-best list per text
        self.owner: dict[int, tuple] = {}  # search key -> (request, text index)
        self.left: dict = {}  # request -> its texts still searching
        self.ready: list = []  # requests with blank texts only: answered at the next step
        self.keys = 0

    def __len__(self) -> int:
        """Requests not yet answered."""
        return len(self.results)

    def add(self, request, texts: Sequence[str]) -> None:
        sources = self.translator._encode(texts)  # blank texts are absent: they stay ("", 0.0)
        keys = list(range(self.keys, self.keys + len(sources)))
        if sources:
            self.search.add(list(sources.values()), keys)  # first: if it raises, nothing is registered
        self.keys += len(sources)
        self.results[request] = [[("", 0.0)] for _ in texts]
        self.owner.update({k: (request, i) for k, i in zip(keys, sources)})
        if sources:
            self.left[request] = len(sources)
        else:
            self.ready.append(request)

    def step(self) -> list[tuple]:
        """One step of the search; -> (request, results) for each request now complete."""
        done, self.ready = self.ready, []
        for key, hyps in self.search.step():
            request, i = self.owner.pop(key)
            self.results[request][i] = self.translator._texts([(h.tokens, h.score) for h in hyps])
            self.left[request] -= 1
            if not self.left[request]:
                del self.left[request]
                done.append(request)
        return [(r, _as_returned(self.results.pop(r), self.nbest)) for r in done]

    def cancel(self, request) -> int:
        """Drop `request` (between steps): its texts leave the running search (`ContinuousBeamSearch.cancel`)
        and `step` never returns it. -> the number of its texts that were still searching."""
        keys = [key for key, (owner, _) in self.owner.items() if owner == request]
        for key in keys:
            del self.owner[key]
        self.results.pop(request, None)
        self.left.pop(request, None)
        if request in self.ready:
            self.ready.remove(request)
        return self.search.cancel(keys)


def _as_returned(results: list[NBest], nbest: bool) -> list[str] | list[NBest]:
    """What `translate` returns: the n-best lists, or each one's best text."""
    return results if nbest else [r[0][0] for r in results]


def line_seed(seed: int, line: int) -> int:
    """The seed of line number `line` in a run seeded with `seed`: a hash, so that neighbouring
    (seed, line) pairs give unrelated random streams. A 64-bit value, as `manual_seed` takes."""
    return stable_hash(f"{seed}:{line}")


def check_vocab(config, tokenizers, where: str = "") -> None:
    """Each tokenizer has as many tokens as the model's embedding; `where` (a path) opens the error."""
    for side, size in (("src", config.src_vocab_size), ("tgt", config.tgt_vocab_size)):
        tok = getattr(tokenizers, side)
        if tok.vocab_size != size:
            raise ValueError(f"{where}{': ' if where else ''}{side} tokenizer has {tok.vocab_size} tokens but the "
                             f"model expects {size}")
