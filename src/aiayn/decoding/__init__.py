"""Decoding: strategies that talk to a model only through the decoding interface
(`interface.Decodable`: `start`, `step`, `state.reorder`, `max_output_length`), all
batched: greedy (`greedy_search`), beam search (`beam_search`) and sampling (`sample`);
and the `Translator`, text in and text out.

Inputs follow `common.encode_source` (ids + EOS, right-padded with PAD).
"""

from aiayn.decoding.beam import Hypothesis, beam_search
from aiayn.decoding.common import encode_source, input_tokens, max_output_length, pad_sources, source_ids
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.interface import Decodable, DecoderState, for_inference
from aiayn.decoding.length_penalty import length_penalty
from aiayn.decoding.sampling import filter_logits, sample

__all__ = [
    "Decodable", "DecoderState", "Hypothesis", "beam_search", "greedy_search", "sample", "filter_logits",
    "for_inference", "length_penalty", "encode_source", "input_tokens", "source_ids", "pad_sources", "max_output_length",
]
