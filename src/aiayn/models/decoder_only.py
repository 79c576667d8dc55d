"""The decoder-only Transformer (GPT; Radford et al., 2018): seed 004 §11's left-to-right descendant.

It is the paper's decoder (§3.1) without the encoder-decoder attention: token embeddings plus
positions, N layers of causal self-attention and the FFN, a final norm when pre-norm, and the
output projection tied to the embedding (§3.4). The layers are `aiayn.modules.layers.DecoderLayer`
built without cross-attention, so training (teacher forcing, an empty cache and a whole block)
and generation (one token a step) run the same code against the same `KVCache`.

Generation goes through the decoding interface (`aiayn.decoding.interface`) unchanged:
`start(prompt)` runs the prompt through the stack, filling the cache, and keeps the logits of its
last position; the first `step` returns them (its input, the searches' BOS, is not a token of the
text), and every later `step` feeds one generated token. So greedy, sampling and beam search
continue the prompt. A batch of prompts must have one length (no padding).

Shape: tokens (B, T) ids -> logits (B, T, V).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import PAD_ID, UNK_ID, ConfigError, LayerOptions, check_types, training_only
from aiayn.models.base import ModelConfig, PretrainedModel
from aiayn.modules.cache import KVCache
from aiayn.modules.dropout import Dropout
from aiayn.modules.embeddings import Embeddings, positional_encoding
from aiayn.modules.layers import DecoderLayer


@dataclass(frozen=True)
class DecoderOnlyConfig(ModelConfig, LayerOptions):
    """A GPT-style language model. The defaults are nanoGPT's CPU example (4 layers, 4 heads, 128
    dims, block 64): small enough to train on a laptop."""

    vocab_size: int = 65
    n_layers: int = 4
    tie_output: bool = True  # §3.4: pre-softmax projection = token embedding
    d_model: int = 128  # LayerOptions' (the paper's base) restated where nanoGPT's example differs
    n_heads: int = 4
    d_ff: int = 512
    dropout: float = training_only(0.0)
    norm_first: bool = True  # GPT-2's pre-norm
    positional: str = "learned"  # GPT's
    max_positions: int = 64  # the block size: the longest context
    scale_embeddings: bool = False

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        self.check_positive("vocab_size", "n_layers")
        if self.vocab_size <= UNK_ID:
            raise ConfigError(f"vocab_size must hold the {UNK_ID + 1} special ids, got {self.vocab_size}")
        self.check_layers()


@dataclass
class LMState:
    """The decoding state: the self-attention `KVCache`, plus the prompt's last logits (N, V)
    until the first `step` hands them out."""

    cache: KVCache
    pending: Tensor | None

    def reorder(self, indices: Tensor) -> "LMState":
        pending = None if self.pending is None else self.pending.index_select(0, indices)
        return LMState(self.cache.reorder(indices), pending)

    def reorder_(self, indices: Tensor) -> "LMState":
        self.cache.reorder_(indices)
        if self.pending is not None:
            self.pending = self.pending.index_select(0, indices)
        return self


class DecoderOnly(PretrainedModel):
    """GPT: causal self-attention layers over tokens. `forward(tokens)` -> next-token logits."""

    model_type = "decoder-only"
    config_class = DecoderOnlyConfig

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__(config)
        cfg = config
        self.embed = Embeddings(cfg.vocab_size, cfg.d_model, PAD_ID, scale=cfg.scale_embeddings)
        self.positions = positional_encoding(cfg.positional, cfg.d_model, cfg.max_positions)
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, cross_attention=False) for i in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        self.output_proj = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.logits_bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.logits_bias else None  # (V,)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache.self_only(len(self.layers), batch, self.embed.weight.device, capacity)

    def hidden(self, tokens: Tensor, cache: KVCache, need_weights: bool = False):
        """tokens (B, T) at positions cache.length ... -> (hidden (B, T, D), self-attention per layer or None)."""
        start = cache.length
        if start + tokens.shape[1] > self.config.max_positions and self.config.positional == "learned":
            raise ValueError(f"{start + tokens.shape[1]} positions exceed the block size {self.config.max_positions}")
        x = self.dropout(self.embed(tokens) + self.positions(tokens.shape[1], start=start))  # (B, T, D)
        weights = []
        for layer in self.layers:
            x, w, _ = layer(x, cache, None, need_weights)
            weights.append(w)
        cache.advance(tokens.shape[1])
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, (weights if need_weights else None)

    def project(self, hidden: Tensor) -> Tensor:
        """(..., D) -> (..., V), tied to the token embedding by default (§3.4), plus `logits_bias`."""
        weight = self.embed.weight if self.output_proj is None else self.output_proj.weight
        return F.linear(hidden, weight, self.logits_bias)

    def forward(self, tokens: Tensor) -> Tensor:
        """Teacher-forced next-token logits: (B, T) -> (B, T, V); position t sees tokens 0..t."""
        cache = self.new_cache(tokens.shape[0], tokens.shape[1])
        return self.project(self.hidden(tokens, cache)[0])

    # -- the decoding interface (aiayn.decoding.interface) ----------------------------------
    def start(self, src: Tensor, capacity: int = 64) -> LMState:
        """Run the prompts src (B, S), all of one length, through the stack."""
        if src.shape[1] == 0:
            raise ValueError("a prompt needs at least one token")
        if bool((src == PAD_ID).any()):
            raise ValueError("prompts are not padded: give a batch of prompts of one length")
        cache = self.new_cache(src.shape[0], src.shape[1] + capacity)
        hidden, _ = self.hidden(src, cache)
        return LMState(cache, self.project(hidden[:, -1]))

    def step(self, tokens: Tensor, state: LMState) -> Tensor:
        """tokens (N,) -> next-token logits (N, V). The first call returns the prompt's."""
        if state.pending is not None:
            logits, state.pending = state.pending, None
            return logits
        return self.project(self.hidden(tokens[:, None], state.cache)[0][:, -1])

    source_takes_positions = True  # the prompt fills the block the output continues (`common.output_limits`)

    @property
    def max_output_length(self) -> int | None:
        return self.config.max_positions if self.config.positional == "learned" else None

    @torch.inference_mode()
    def attention(self, tokens: Tensor) -> list[Tensor]:
        """Self-attention maps of one pass, per layer (B, H, T, T); causal: row t is 0 beyond t."""
        return self.hidden(tokens, self.new_cache(tokens.shape[0], tokens.shape[1]), need_weights=True)[1]
