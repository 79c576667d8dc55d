"""Before the Transformer: a recurrent encoder-decoder with attention (Bahdanau et al., 2014;
Luong et al., 2015), the models the paper's §1 and Table 1 compare against.

    encoder   embeddings -> bidirectional GRU/LSTM (packed, so padding never enters a state)
              -> memory (B, S, H): the two directions' outputs mapped to H
    decoder   Luong et al.'s step (§3): the RNN reads the previous token (and, with
              `input_feeding`, the previous attentional vector h̃, §3.3), then attends:
                  h_t = RNN([y_{t-1}; h̃_{t-1}], h_{t-1})
                  a_t = softmax(score(h_t, memory)),  c_t = Σ_s a_ts · memory_s
                  h̃_t = tanh(W_c [c_t; h_t]),       logits = W_o h̃_t
    scores    `Score` below: additive (Bahdanau), dot, general and concat (Luong).

The first decoder state is tanh(W_0 · mean of the real source positions of the memory).
Shapes: B batch, S source length, T target length, H hidden size, E embedding size, L layers,
N decoding rows (sentences × beams). It implements the decoding interface
(`aiayn.decoding.interface`): `start`, `step`, `RNNState.reorder`/`reorder_`, `max_output_length`,
so greedy, beam and sampling decode it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from aiayn.config import PAD_ID, UNK_ID, ConfigError, check_types, training_only
from aiayn.models.base import ModelConfig, PretrainedModel
from aiayn.models.transformer import AttentionWeights
from aiayn.modules import masks
from aiayn.modules.dropout import Dropout

CELLS = ("gru", "lstm")
SCORES = ("additive", "dot", "general", "concat")


@dataclass(frozen=True)
class RNNConfig(ModelConfig):
    """The recurrent encoder-decoder's hyper-parameters (not the paper's: its baselines')."""

    src_vocab_size: int = 8000
    tgt_vocab_size: Optional[int] = None  # None: same as source
    cell: str = "gru"  # "gru" | "lstm"
    embed_dim: int = 256
    hidden_size: int = 256
    encoder_layers: int = 1
    decoder_layers: int = 1
    dropout: float = training_only(0.1)
    score: str = "additive"  # see `Score`
    input_feeding: bool = False  # Luong et al. §3.3
    max_positions: int = 1024  # the longest source a Translator passes (there is no position table)

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        if self.tgt_vocab_size is None:
            object.__setattr__(self, "tgt_vocab_size", self.src_vocab_size)
        self.check_positive("src_vocab_size", "tgt_vocab_size", "embed_dim", "hidden_size", "encoder_layers",
                            "decoder_layers", "max_positions")
        if min(self.src_vocab_size, self.tgt_vocab_size) <= UNK_ID:
            raise ConfigError(f"both vocabularies must hold the {UNK_ID + 1} special ids")
        if self.cell not in CELLS or self.score not in SCORES:
            raise ConfigError(f"cell must be one of {CELLS} and score one of {SCORES}, got {self.cell!r}, {self.score!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def width(self) -> int:
        """The width the learning-rate schedule scales with (the "noam" schedule's d_model)."""
        return self.hidden_size

    @property
    def depth(self) -> str:
        return f"{self.encoder_layers}+{self.decoder_layers}"


class Score(nn.Module):
    """Attention scores e(q, k) of a decoder state q (N, H) against encoder states k (N, S, H).

    additive  vᵀ tanh(W q + U k)     Bahdanau et al. (2014), §3.1 and Appendix A (their "alignment
                                     model"; here q is the current state h_t, Luong's placement)
    dot       qᵀ k                   Luong et al. (2015), §3.1, eq. 8
    general   qᵀ W_a k               Luong et al. (2015), eq. 8
    concat    vᵀ tanh(W_a [q; k])    Luong et al. (2015), eq. 8

    The parts that depend on k alone are computed once per source (`keys`).
    """

    def __init__(self, kind: str, hidden: int):
        super().__init__()
        self.kind = kind
        if kind in ("additive", "concat"):
            self.w_q = nn.Linear(hidden, hidden, bias=False)
            self.w_k = nn.Linear(hidden, hidden, bias=kind == "additive")
            self.v = nn.Linear(hidden, 1, bias=False)
        elif kind == "general":
            self.w_k = nn.Linear(hidden, hidden, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        """(N, S, H) -> what `forward` compares q with, (N, S, H)."""
        return memory if self.kind == "dot" else self.w_k(memory)

    def forward(self, q: Tensor, keys: Tensor) -> Tensor:
        """q (N, H) or (N, T, H), keys (N, S, H) -> scores (N, S) or (N, T, S)."""
        if self.kind in ("dot", "general"):
            return q @ keys.transpose(-2, -1) if q.dim() == 3 else (keys @ q[:, :, None])[:, :, 0]
        if q.dim() == 2:
            return self.v(torch.tanh(self.w_q(q)[:, None, :] + keys))[..., 0]  # (N, S)
        return self.v(torch.tanh(self.w_q(q)[:, :, None, :] + keys[:, None, :, :]))[..., 0]  # (N, T, S)


@dataclass
class RNNState:
    """The RNN's decoding state (`aiayn.decoding.interface.DecoderState`).

    hidden:  (L, N, H), or (h, c) for an LSTM   the decoder RNN's state
    feed:    (N, H) or None                     the last attentional vector h̃ (input feeding)
    memory:  (N, S, H)                          encoder states (values)
    keys:    (N, S, H)                          `Score.keys(memory)`, once per source
    mask:    (N, S) bool                        True at real source tokens
    """

    hidden: Tensor | tuple[Tensor, Tensor]
    feed: Optional[Tensor]
    memory: Tensor
    keys: Tensor
    mask: Tensor

    def reorder(self, indices: Tensor) -> "RNNState":
        rows = lambda t: t.index_select(0, indices)  # noqa: E731
        return RNNState(_map_hidden(self.hidden, lambda h: h.index_select(1, indices)),
                        None if self.feed is None else rows(self.feed), rows(self.memory), rows(self.keys),
                        rows(self.mask))

    def reorder_(self, indices: Tensor) -> "RNNState":
        """In place, for rows of the same source: memory, keys and mask stay as they are."""
        self.hidden = _map_hidden(self.hidden, lambda h: h.index_select(1, indices))
        self.feed = None if self.feed is None else self.feed.index_select(0, indices)
        return self


def _map_hidden(hidden, fn):
    return tuple(fn(h) for h in hidden) if isinstance(hidden, tuple) else fn(hidden)


class RNNEncoderDecoder(PretrainedModel):
    """Shape: src (B, S) ids + EOS padded with PAD_ID; tgt (B, T) = BOS + prefix -> logits (B, T, V)."""

    model_type = "rnn"
    config_class = RNNConfig

    def __init__(self, config: RNNConfig):
        super().__init__(config)
        c, H, E = config, config.hidden_size, config.embed_dim
        rnn = nn.GRU if c.cell == "gru" else nn.LSTM
        between = c.dropout if c.encoder_layers > 1 else 0.0
        self.src_embed = nn.Embedding(c.src_vocab_size, E, padding_idx=PAD_ID)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, E, padding_idx=PAD_ID)
        self.encoder = rnn(E, H, c.encoder_layers, batch_first=True, bidirectional=True, dropout=between)
        self.bridge = nn.Linear(2 * H, H)  # both directions -> memory
        self.init_state = nn.Linear(H, c.decoder_layers * H)
        feed = H if c.input_feeding else 0
        self.decoder = rnn(E + feed, H, c.decoder_layers, batch_first=True,
                           dropout=c.dropout if c.decoder_layers > 1 else 0.0)
        self.score = Score(c.score, H)
        self.combine = nn.Linear(2 * H, H, bias=False)  # W_c [c_t; h_t]
        self.output = nn.Linear(H, c.tgt_vocab_size)
        self.dropout = Dropout(c.dropout)

    # -- encoder ------------------------------------------------------------------------------
    def start(self, src: Tensor, capacity: int = 64) -> RNNState:
        """Encode src (B, S): the decoding state before the first step (`capacity` is unused)."""
        mask = masks.padding_mask(src, PAD_ID)  # (B, S)
        lengths = mask.sum(1).clamp(min=1).cpu()
        x = self.dropout(self.src_embed(src))  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, S, 2H)
        memory = self.bridge(out)  # (B, S, H)
        mean = (memory * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)  # (B, H)
        h0 = torch.tanh(self.init_state(mean)).view(src.shape[0], self.config.decoder_layers, -1)  # (B, L, H)
        h0 = h0.transpose(0, 1)  # (L, B, H): the layout nn.GRU / nn.LSTM take for their state
        hidden = (h0.contiguous(), torch.zeros_like(h0)) if self.config.cell == "lstm" else h0.contiguous()
        feed = memory.new_zeros(src.shape[0], self.config.hidden_size) if self.config.input_feeding else None
        return RNNState(hidden, feed, memory, self.score.keys(memory), mask)

    # -- decoder ------------------------------------------------------------------------------
    def _attend(self, h: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        """h (N, [T,] H) -> attentional vectors h̃ (N, [T,] H) and weights (N, [T,] S)."""
        scores = self.score(h, state.keys)
        mask = state.mask if h.dim() == 2 else state.mask[:, None, :]
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
        context = weights @ state.memory if h.dim() == 3 else (weights[:, None, :] @ state.memory)[:, 0]
        return torch.tanh(self.combine(torch.cat([context, h], dim=-1))), weights

    def step(self, tokens: Tensor, state: RNNState) -> Tensor:
        """tokens (N,) -> logits (N, V); `state` moves one position on."""
        return self._step(tokens, state)[0]

    def _step(self, tokens: Tensor, state: RNNState) -> tuple[Tensor, Tensor]:
        """-> (logits (N, V), attention weights (N, S))."""
        x = self.dropout(self.tgt_embed(tokens))  # (N, E)
        if state.feed is not None:
            x = torch.cat([x, state.feed], dim=-1)
        out, state.hidden = self.decoder(x[:, None, :], state.hidden)  # (N, 1, H)
        attentional, weights = self._attend(out[:, 0], state)  # (N, H), (N, S)
        if state.feed is not None:
            state.feed = attentional
        return self.output(self.dropout(attentional)), weights

    @torch.inference_mode()
    def attention(self, src: Tensor, tgt_in: Tensor):
        """The alignment of one teacher-forced pass (Bahdanau et al.'s Figure 3): cross-attention
        only, as one layer with one head, (B, 1, T, S). The RNN has no self-attention."""
        state = self.start(src)
        weights = torch.stack([self._step(tgt_in[:, t], state)[1] for t in range(tgt_in.shape[1])], dim=1)
        return AttentionWeights(encoder=[], decoder=[], cross=[weights[:, None]])  # (B, 1, T, S)

    @property
    def max_output_length(self) -> Optional[int]:
        return None

    @property
    def max_input_length(self) -> int:
        return self.config.max_positions

    def forward(self, src: Tensor, tgt: Tensor, with_ponder: bool = False):
        """Teacher-forced logits (B, T, V); with `with_ponder`, (logits, None), as the Transformer's
        call form (an RNN has no ponder time). Without input feeding the decoder RNN runs over the whole
        prefix at once; with it, step by step (each input needs the previous attentional vector)."""
        state = self.start(src)
        if state.feed is not None:
            logits = torch.stack([self.step(tgt[:, t], state) for t in range(tgt.shape[1])], dim=1)
        else:
            out, _ = self.decoder(self.dropout(self.tgt_embed(tgt)), state.hidden)  # (B, T, H)
            attentional, _ = self._attend(out, state)  # (B, T, H)
            logits = self.output(self.dropout(attentional))
        return (logits, None) if with_ponder else logits
