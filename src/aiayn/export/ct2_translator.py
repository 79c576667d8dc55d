"""`CT2Translator`: the interface of `aiayn.decoding.translator.Translator` on a CTranslate2 export.

Text is tokenized with aiayn's tokenizer files in the export directory, sources are cut as
task.json says (`max_input_tokens`, `keep`), CTranslate2 decodes (`translate_batch`), and the
target pieces map back to ids and detokenize. Blank lines translate to "", as in `Translator`.

How aiayn's decoding settings map onto CTranslate2's:

    beam_size, method   beam_size (greedy and sampling: 1); sampling: sampling_topk/topp/temperature
                        from `SamplingConfig` (top_k 0 = the whole vocabulary in both)
    max_len_a/b         max_decoding_length, per sentence as in aiayn (a·|src| + b, EOS included
                        in both): sentences are decoded in groups of equal limit
    nbest               num_hypotheses (reranked, see below)
    no_repeat_ngram_size  no_repeat_ngram_size (the same rule: no n-gram of the output twice);
                        CTranslate2 bans before its softmax, aiayn after it (as fairseq and Hugging
                        Face do), so greedy outputs are the same but beam scores, and so beam
                        outputs, may differ
    min_len             min_decoding_length (EOS is banned before that many tokens in both)
    banned tokens       PAD and BOS are suppressed (`suppress_sequences`)

Length penalty. CTranslate2 ranks finished hypotheses by log P / |Y|^α ("plain" in
`aiayn.decoding.length_penalty`); with `return_end_token` |Y| counts the EOS, as aiayn's does.
aiayn's default is the GNMT form ((5 + |Y|) / 6)^α (the paper's). Beam search keeps the same live
beams under either form (the penalty only ranks finished hypotheses), so for "gnmt" CTranslate2
returns every finished hypothesis it collected (`num_hypotheses` = beam · patience), their
log-probabilities are recovered (score · |Y|^α), and they are re-ranked by the GNMT form. What can
still differ from aiayn is when the search stops: CTranslate2 after beam · patience finished
hypotheses (`PATIENCE`), aiayn once no live beam can beat its n-th best (`aiayn.decoding.beam`).
Scores are the length-normalised log-probabilities of the chosen form, as `Translator` returns them.

Not available: attention weights (`return_attention` in the server answers 400) and seeded
sampling (CTranslate2's random generator is one per process, not one per sentence).
"""

from __future__ import annotations

import logging
from itertools import groupby
from pathlib import Path

from aiayn.config import BOS_ID, DEFAULT_BATCH_TOKENS, EOS_ID, PAD_ID, DecodeConfig, SamplingConfig
from aiayn.data.tokenizer import load_tokenizers
from aiayn.decoding.common import max_output_length
from aiayn.decoding.length_penalty import length_penalty
from aiayn.decoding.translator import TextTranslator
from aiayn.export.ctranslate2 import read_manifest, require_ctranslate2
from aiayn.model_dir import read_task_info, translator_options

log = logging.getLogger(__name__)

PATIENCE = 2.0  # beam search runs until beam_size * PATIENCE hypotheses are finished


class CT2Translator(TextTranslator):
    """Translate with a CTranslate2 export (`aiayn.export.export_ctranslate2`).

    `engine` is a `ctranslate2.Translator`; `max_positions` the rows of the exported position tables
    (longer outputs end there); `max_input_length` the model's own source limit (`Transformer.max_input_length`:
    without `max_input_tokens` longer sources are cut there, as the native `Translator` cuts them). The other
    arguments are `Translator`'s: `decode`/`sampling` hold the defaults that `translate` keyword arguments override.
    """

    def __init__(self, engine, tokenizers, max_positions: int, decode: DecodeConfig | None = None,
                 sampling: SamplingConfig | None = None, max_input_tokens: int | None = None,
                 batch_tokens: int = DEFAULT_BATCH_TOKENS, keep: str = "start", patience: float = PATIENCE,
                 max_input_length: int | None = None):
        limit = max_input_tokens or max_input_length or max_positions
        super().__init__(tokenizers, decode, sampling, min(limit, max_positions), batch_tokens, keep)
        self.engine, self.max_positions, self.patience = engine, max_positions, patience
        self._src_pieces = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
        tgt_pieces = tokenizers.tgt.pieces(range(tokenizers.tgt.vocab_size))
        self._tgt_ids = {p: i for i, p in enumerate(tgt_pieces)}
        self._suppress = [[tgt_pieces[PAD_ID]], [tgt_pieces[BOS_ID]]]

    @classmethod
    def from_pretrained(cls, export_dir: str | Path, device: str = "cpu", compute_type: str = "default",
                        threads: int = 0, **kwargs) -> "CT2Translator":
        """Load an export directory. `device`: "cpu", "cuda" or "cuda:N"; `compute_type`: CTranslate2's
        ("default": the exported quantization); `threads`: CPU threads (0: CTranslate2's default).
        `kwargs` go to the constructor and, when not None, win over the export's task.json."""
        export_dir = Path(export_dir)
        if not export_dir.is_dir():
            raise FileNotFoundError(f"{export_dir}: export directory not found")
        manifest = read_manifest(export_dir)
        ct2 = require_ctranslate2()
        kind, _, index = str(device).partition(":")
        engine = ct2.Translator(str(export_dir), device=kind, device_index=int(index or 0),
                                compute_type=compute_type, intra_threads=threads)
        options = {**translator_options(read_task_info(export_dir), export_dir), **{k: v for k, v in kwargs.items() if v is not None}}
        return cls(engine, load_tokenizers(export_dir), manifest["positions"],
                   max_input_length=manifest.get("max_input_length"), **options)  # absent from exports before 2026-11-28

    @property
    def device(self) -> str:
        return self.engine.device

    def _decode_batches(self, sources, decode, sampling, first_index):
        for limit, batch in self._groups(sources, decode):
            yield batch, self._search([sources[i] for i in batch], limit, decode, sampling)

    def settings(self, overrides: dict, nbest: int | None = None) -> tuple[DecodeConfig, SamplingConfig]:
        decode, sampling = super().settings(overrides, nbest)
        if decode.method == "sample" and sampling.seed is not None:
            raise ValueError("seeded sampling is not available with the ctranslate2 backend")
        return decode, sampling

    def _groups(self, sources: dict[int, list[int]], decode: DecodeConfig):
        """(output limit, indices) groups: CTranslate2 takes one max_decoding_length per call."""
        import torch


        order = list(sources)
        lengths = torch.tensor([len(sources[i]) for i in order])  # (N,) EOS included
        limits = max_output_length(lengths, decode.max_len_a, decode.max_len_b).clamp(max=self.max_positions)
        pairs = sorted(zip(limits.tolist(), order))
        for limit, group in groupby(pairs, key=lambda p: p[0]):
            yield limit, [i for _, i in group]

    # -- CTranslate2 ----------------------------------------------------------------------------
    def _search(self, sources: list[list[int]], limit: int, decode: DecodeConfig, sampling: SamplingConfig):
        """-> per source, a list of (target ids without EOS, score), best first."""
        tokens = [[self._src_pieces[i] for i in ids[:-1]] for ids in sources]  # CTranslate2 adds EOS
        results = self.engine.translate_batch(tokens, **self._options(limit, decode, sampling))
        beam = decode.method == "beam" and decode.beam_size > 1
        return [self._hypotheses(r, decode) if beam else [(self._ids(r.hypotheses[0]), 0.0)] for r in results]

    def _options(self, limit: int, decode: DecodeConfig, sampling: SamplingConfig) -> dict:
        options = dict(max_decoding_length=limit, min_decoding_length=decode.min_len, max_input_length=0,
                       suppress_sequences=self._suppress, return_end_token=True,
                       max_batch_size=self.batch_tokens, batch_type="tokens", beam_size=1,
                       no_repeat_ngram_size=decode.no_repeat_ngram_size)
        if decode.method == "sample":
            options.update(sampling_topk=sampling.top_k, sampling_topp=sampling.top_p,
                           sampling_temperature=sampling.temperature)
        elif decode.method == "beam" and decode.beam_size > 1:
            # every finished hypothesis comes back: they are re-ranked in `_hypotheses`
            n = round(decode.beam_size * self.patience)
            options.update(beam_size=decode.beam_size, patience=self.patience, num_hypotheses=n,
                           length_penalty=decode.length_penalty, return_scores=True)
        return options

    def _hypotheses(self, result, decode: DecodeConfig) -> list[tuple[list[int], float]]:
        """CTranslate2's scores are log P / |Y|^α; rescored by `decode`'s form, best `nbest` first."""
        alpha, rescored = decode.length_penalty, []
        for pieces, score in zip(result.hypotheses, result.scores):
            n = len(pieces)  # EOS included (return_end_token)
            log_prob = score * float(length_penalty(n, alpha, "plain"))
            rescored.append((self._ids(pieces), log_prob / float(length_penalty(n, alpha, decode.length_penalty_form))))
        return sorted(rescored, key=lambda h: -h[1])[: decode.nbest]

    def _ids(self, pieces: list[str]) -> list[int]:
        ids = [self._tgt_ids[p] for p in pieces]
        return ids[:-1] if ids and ids[-1] == EOS_ID else ids
