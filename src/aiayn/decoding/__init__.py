"""Decoding strategies, all batched and all on the key/value cache:
greedy (`greedy_search`), beam search (`beam_search`) and sampling (`sample`).

Inputs follow `common.encode_source` (ids + EOS, right-padded with PAD).
"""

from aiayn.decoding.beam import Hypothesis, beam_search
from aiayn.decoding.common import encode_source, max_output_length, pad_sources, source_ids
from aiayn.decoding.greedy import greedy_search
from aiayn.decoding.length_penalty import length_penalty
from aiayn.decoding.sampling import filter_logits, sample

__all__ = [
    "Hypothesis", "beam_search", "greedy_search", "sample", "filter_logits", "length_penalty",
    "encode_source", "source_ids", "pad_sources", "max_output_length",
]
