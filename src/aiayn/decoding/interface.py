"""The decoding interface: all that greedy search, beam search, sampling and the attention
pictures know of a model. Any model type that implements it is decoded by the same code.

Anchors in other toolkits: fairseq's `reorder_incremental_state`, OpenNMT-py's
`map_state`, Hugging Face's `Cache` classes. Here the state is one explicit object,
created by `start`, advanced by `step`, reordered by the search; nothing is kept on the
model, so concurrent decoding calls on one model never share state.

Conventions (see `aiayn.decoding.common`):
    src: (B, S) long, token ids + EOS, right-padded with PAD_ID (`aiayn.config`)
    rows: N = B (greedy, sampling) or B·K (beam K); row b·K + k is beam k of sentence b
    every output starts from BOS_ID and ends at EOS_ID or at its length limit

The encoder-decoder's state is `aiayn.modules.cache.KVCache`, which documents each tensor:
cross-attention keys/values and masks, one per source (the beams of a sentence share them),
self-attention keys/values (N, H, C, Dh) of capacity C, and the number of positions decoded.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from aiayn.runtime import resolve_precision


class DecoderState(Protocol):
    """A model's per-row decoding state (for the encoder-decoder: `KVCache`)."""

    def reorder(self, indices: Tensor) -> "DecoderState":
        """A new state whose row i is this state's row indices[i]. indices: (N',) long, any rows:
        beam search expands sentences to beams with it and drops finished sentences."""

    def reorder_(self, indices: Tensor) -> "DecoderState":
        """The same, in place, for indices that keep every row within the rows of its own source
        (beams of one sentence): what depends only on the source need not be copied."""


@runtime_checkable
class Decodable(Protocol):
    """What a model offers the search code."""

    def start(self, src: Tensor, capacity: int = 64) -> DecoderState:
        """Encode src (B, S) once; the state has room for `capacity` steps (it grows beyond)."""

    def step(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """tokens (N,) long, each row's last token (BOS first) -> scores (N, V) whose
        log_softmax is the next-token log-probability. Extends `state` in place by one position."""

    @property
    def max_output_length(self) -> int | None:
        """The model's own bound on output tokens (e.g. a learned position table), or None. A model
        whose source takes positions of that table too sets `source_takes_positions = True`."""


class ShowsAttention(Protocol):
    """Models that can show their attention (`aiayn.plots.attention`)."""

    def attention(self, src: Tensor, tgt_in: Tensor) -> Any:
        """The attention maps of one teacher-forced pass of src (B, S) and tgt_in (B, T) = BOS + output."""


def for_inference(model, precision: str = "fp32") -> Decodable:
    """The fastest decodable view of `model`: its `fast_decoder(precision)` when it has one and is in
    eval mode, else the model itself. Build it once per set of weights (a `Translator` does).

    `precision`: "fp32", "bf16", "int8" (`aiayn.models.fast_decoder`) or "auto" (bf16 where the
    device multiplies bf16 natively, else fp32; `runtime.resolve_precision`). A model that cannot
    decode in the precision asked for is an error, except for "auto", which falls back to fp32."""
    resolved = resolve_precision(precision, next(model.parameters()).device)
    fast = getattr(model, "fast_decoder", None)
    why = f"a {type(model).__name__} {'in training mode ' if fast else ''}has no fast decoder"
    if fast is not None and not getattr(model, "training", False):
        try:
            return fast(resolved)
        except ValueError as e:  # e.g. a subclass with other layers: its own step is the right math
            why = str(e)
    if resolved == "fp32" or precision == "auto":
        return model
    raise ValueError(f"cannot decode in {resolved}: {why}")
