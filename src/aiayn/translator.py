"""`Translator`: text in, text out, for a model directory holding config.json,
model.safetensors and the tokenizer files (`aiayn.data.tokenizer.save_tokenizers`).

Sources are encoded as token ids + EOS (`aiayn.decoding.encode_source`, the convention
the trainer follows). Sentences are sorted by length, packed into batches of at most
`batch_tokens` padded source tokens, decoded, and returned in input order. Blank lines
are not decoded: they translate to "" so output stays aligned with input.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from aiayn.config import DecodeConfig
from aiayn.decoding import beam_search, encode_source, greedy_search, pad_sources, sample

DEFAULT_BATCH_TOKENS = 4096  # padded source tokens per batch; a speed knob, not a paper setting
METHODS = ("beam", "greedy", "sample")

NBest = list[tuple[str, float]]


class Translator:
    """Translate with a trained `Transformer` and its tokenizers.

    `decode` holds the default search settings (`DecodeConfig()`: beam 4, GNMT α = 0.6,
    |src| + 50); `translate` keyword arguments override them per call.
    """

    def __init__(self, model, tokenizers, decode: DecodeConfig | None = None,
                 max_input_tokens: int | None = None, batch_tokens: int = DEFAULT_BATCH_TOKENS):
        self.model = model.eval()
        self.tokenizers = tokenizers
        self.decode = decode or DecodeConfig()
        self.max_input_tokens = max_input_tokens or model.config.max_positions
        self.batch_tokens = batch_tokens
        _check_vocab(model.config, tokenizers)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str | torch.device = "cpu", **kwargs) -> "Translator":
        """Load config, weights and tokenizers from one directory. Errors name the bad path."""
        from aiayn.data.tokenizer import load_tokenizers
        from aiayn.model import Transformer

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir}: model directory not found")
        model = Transformer.from_pretrained(model_dir, device=device)
        return cls(model, load_tokenizers(model_dir), **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def translate(self, sentences: Sequence[str], *, nbest: int | None = None, method: str = "beam",
                  temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                  progress: Callable[[int], None] | None = None, **decode_overrides) -> list[str] | list[NBest]:
        """Translate `sentences`, keeping their order.

        Returns one string per sentence, or, when `nbest` is given, a list of up to
        `nbest` (text, score) pairs per sentence, best first (score: length-normalised
        log-probability; 0.0 for greedy/sampled outputs and blank lines).
        `decode_overrides` are `DecodeConfig` fields (beam_size, length_penalty, ...).
        `method`: "beam" (beam_size 1 runs greedy search, which it equals), "greedy" or
        "sample" (temperature, top_k, top_p, seeded by `seed`). `progress(n)` is called
        after each batch with the number of sentences it held.
        """
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        overrides = {k: v for k, v in decode_overrides.items() if v is not None}
        if nbest is not None:
            overrides["nbest"] = nbest
        cfg = dataclasses.replace(self.decode, **overrides)
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        search = lambda src: self._search(src, cfg, method, temperature, top_k, top_p, generator)  # noqa: E731

        results: list[NBest] = [[("", 0.0)] for _ in sentences]
        sources = {i: encode_source(self.tokenizers.src, s, self.max_input_tokens)
                   for i, s in enumerate(sentences) if s.strip()}
        if progress is not None and len(sources) < len(sentences):
            progress(len(sentences) - len(sources))  # blank lines are done already
        for batch in self._batches(sources):
            src = pad_sources([sources[i] for i in batch], self.model.config.pad_id, self.device)
            for i, hyps in zip(batch, search(src)):
                results[i] = [(self.tokenizers.tgt.decode(tokens), score) for tokens, score in hyps]
            if progress is not None:
                progress(len(batch))
        return results if nbest is not None else [r[0][0] for r in results]

    def _search(self, src, cfg: DecodeConfig, method: str, temperature, top_k, top_p, generator):
        """-> per row, a list of (token ids, score)."""
        a, b = cfg.max_len_a, cfg.max_len_b
        if method == "sample":
            outs = sample(self.model, src, temperature, top_k, top_p, generator, a, b)
        elif method == "greedy" or cfg.beam_size == 1:
            outs = greedy_search(self.model, src, a, b)
        else:
            return [[(h.tokens, h.score) for h in hyps] for hyps in beam_search(self.model, src, cfg)]
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


def _check_vocab(config, tokenizers) -> None:
    for side, size in (("src", config.src_vocab_size), ("tgt", config.tgt_vocab_size)):
        tok = getattr(tokenizers, side)
        if tok.vocab_size != size:
            raise ValueError(f"{side} tokenizer has {tok.vocab_size} tokens but the model expects {size}")
