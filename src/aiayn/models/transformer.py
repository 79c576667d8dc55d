"""The Transformer encoder-decoder (§3, Figure 1).

Shape legend, used in comments throughout the package:
    B batch, S source length, T target length (new positions), P cached target positions,
    D d_model, H heads, Dh head dim (D / H), V vocabulary, K beam (rows = B * K).
Masks are boolean, True = may attend (`aiayn.modules.masks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import PAD_ID, TransformerConfig
from aiayn.models.base import PretrainedModel
from aiayn.models.fast_decoder import FastDecoder
from aiayn.modules import masks
from aiayn.modules.cache import KVCache
from aiayn.modules.copy_attention import CopyAttention
from aiayn.modules.dropout import Dropout
from aiayn.modules.embeddings import Embeddings, normal_init_, positional_encoding
from aiayn.modules.layers import DecoderLayer, EncoderLayer
from aiayn.modules.sentences import SentencePooling
from aiayn.modules.universal import UniversalDecoder, UniversalEncoder

@dataclass
class EncoderOutput:
    memory: Tensor  # (B, S, D)
    src_mask: Tensor  # (B, S) bool, True at real tokens
    attentions: list[Tensor] | None = None  # per layer (B, H, S, S), when asked for
    src: Tensor | None = None  # (B, S) the source ids, kept for copy attention
    ponder: Tensor | None = None  # scalar: mean steps per source position, with ACT halting


@dataclass
class DecoderOutput:
    logits: Tensor  # (B, T, V)
    cache: KVCache
    self_attentions: list[Tensor] | None = None  # per layer (B, H, T, P+T)
    cross_attentions: list[Tensor] | None = None  # per layer (B, H, T, S)


def _positional(cfg: TransformerConfig) -> nn.Module:
    return positional_encoding(cfg.positional, cfg.d_model, cfg.max_positions, cfg.sinusoid_layout)


class Encoder(nn.Module):
    """N identical layers over embedded + position-encoded source tokens (§3.1); or, with
    `recurrence = "universal"`, one layer applied again and again (`aiayn.modules.universal`).
    With `source_units = "sentences"` its units are sentence vectors (`aiayn.modules.sentences`)."""

    def __init__(self, cfg: TransformerConfig, embed: Embeddings):
        super().__init__()
        self.embed, self.positions = embed, _positional(cfg)
        self.sentences = SentencePooling(cfg.sentence_ends) if cfg.source_units == "sentences" else None
        self.from_end = cfg.source_positions == "end"
        self.dropout = Dropout(cfg.dropout)
        universal = cfg.universal
        self.layers = None if universal else nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.universal = UniversalEncoder(cfg, cfg.steps(cfg.n_encoder_layers)) if universal else None
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(self, src: Tensor, src_mask: Tensor, need_weights: bool = False):
        """src: (B, S) ids; src_mask: (B, S) -> (memory (B, S, D), its mask (B, S), weights per layer or
        step or None, ponder time or None); with sentences as units, S counts sentences in the outputs."""
        x = self.embed(src)  # (B, S, D)
        if self.sentences is not None:
            x, src_mask = self.sentences(x, src, src_mask)  # (B, N, D), (B, N)
        attn_mask = None if bool(src_mask.all()) else masks.key_mask(src_mask)  # (B, 1, 1, S)
        positions, ponder = self._positions(src_mask), None
        if self.universal is not None:  # positions join before every step
            x, weights, ponder = self.universal(self.dropout(x), positions, attn_mask, src_mask, need_weights)
        else:
            x, weights = self.dropout(x + positions), []  # (B, S, D)
            for layer in self.layers:
                x, w = layer(x, attn_mask, need_weights)
                weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, src_mask, (weights if need_weights else None), ponder


    def _positions(self, src_mask: Tensor) -> Tensor:
        """(S, D), or with `source_positions = "end"` (B, S, D): positions counted back from each
        row's last real token, so the end of a source (a question after its context) is at the
        same positions whatever the source's length; padding takes position 0 (it is masked)."""
        table = self.positions(src_mask.shape[1])  # (S, D)
        if not self.from_end:
            return table
        back = src_mask.sum(1, keepdim=True) - 1 - torch.arange(src_mask.shape[1], device=src_mask.device)
        return table[back.clamp(min=0)]  # (B, S, D)


class Decoder(nn.Module):
    """N identical layers with masked self-attention and encoder-decoder attention (§3.1); or, with
    `recurrence = "universal"`, one layer applied again and again (`aiayn.modules.universal`)."""

    def __init__(self, cfg: TransformerConfig, embed: Embeddings):
        super().__init__()
        self.embed, self.positions = embed, _positional(cfg)
        self.dropout = Dropout(cfg.dropout)
        universal = cfg.universal
        self.layers = None if universal else nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.n_decoder_layers))
        self.universal = UniversalDecoder(cfg, cfg.steps(cfg.n_decoder_layers)) if universal else None
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Each layer's (or step's) cross-attention keys and values (B, H, S, Dh) of `memory` (§3.2.3)."""
        if self.universal is not None:
            return self.universal.cross_kv(memory)
        return [layer.cross_attn.project_kv(memory) for layer in self.layers]

    def forward(self, tgt: Tensor, cache: KVCache, need_weights: bool = False):
        """tgt: (B, T) ids at positions cache.length ...; returns hidden (B, T, D) and weights."""
        positions = self.positions(tgt.shape[1], start=cache.length)  # (T, D)
        if self.universal is not None:  # positions join before every step
            x, self_ws, cross_ws = self.universal(self.dropout(self.embed(tgt)), positions, cache, need_weights)
        else:
            x, self_ws, cross_ws = self.dropout(self.embed(tgt) + positions), [], []
            for layer in self.layers:
                x, sw, cw = layer(x, cache, cache.cross_mask, need_weights)
                self_ws.append(sw)
                cross_ws.append(cw)
        cache.advance(tgt.shape[1])
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, (self_ws if need_weights else None), (cross_ws if need_weights else None)


@dataclass
class AttentionWeights:
    """Attention of one teacher-forced pass, per layer: encoder (B, H, S, S),
    decoder (B, H, T, T), cross (B, H, T, S)."""

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]


class Transformer(PretrainedModel):
    """The encoder-decoder of Figure 1.

    Shape:
        src: (B, S) token ids, padded with PAD_ID; tgt: (B, T) decoder input ids
        (BOS + target prefix); forward returns logits (B, T, V_tgt).

    Implements the decoding interface (`aiayn.decoding.interface.Decodable`): `start`,
    `step`, `max_output_length`, `attention`; its decoding state is the `KVCache`.
    `fast_decoder()` gives an inference-only object with the same interface and faster steps.
    """

    model_type = "encoder-decoder"
    config_class = TransformerConfig

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        cfg = config
        src_embed = Embeddings(cfg.src_vocab_size, cfg.d_model, PAD_ID, cfg.scale_embeddings)
        tgt_embed = src_embed if cfg.share_embeddings else Embeddings(cfg.tgt_vocab_size, cfg.d_model, PAD_ID,
                                                                      cfg.scale_embeddings)
        self.encoder = Encoder(cfg, src_embed)
        self.decoder = Decoder(cfg, tgt_embed)
        self.output_proj = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        if self.output_proj is not None:
            normal_init_(self.output_proj.weight, cfg.d_model**-0.5)
        self.copy = CopyAttention(cfg.d_model) if cfg.copy_attention else None
        self.logits_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab_size)) if cfg.logits_bias else None  # (V,)

    # -- the model's own entry points -------------------------------------------------------
    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOutput:
        src_mask = masks.padding_mask(src, PAD_ID)  # (B, S)
        memory, src_mask, weights, ponder = self.encoder(src, src_mask, need_weights)
        return EncoderOutput(memory, src_mask, weights, src, ponder)

    def init_cache(self, enc: EncoderOutput, capacity: int = 64) -> KVCache:
        """A fresh cache holding each decoder layer's cross-attention keys/values (§3.2.3)."""
        cross = self.decoder.cross_kv(enc.memory)
        copy_source = None if self.copy is None else (self.copy.project_keys(enc.memory), enc.src)
        return KVCache(cross, enc.src_mask, capacity, copy_source)

    def decode(self, tgt: Tensor, cache: KVCache, need_weights: bool = False) -> DecoderOutput:
        """Run the decoder on new target positions and extend `cache` in place.

        tgt: (B, T) ids for positions cache.length .. cache.length + T - 1. With an empty
        cache and the whole prefix this is teacher forcing; with T = 1 it is one step.
        """
        if cache.start is not None:
            raise ValueError("this cache holds rows at different positions (continuous batching), which only "
                             "FastDecoder.step handles")
        hidden, self_ws, cross_ws = self.decoder(tgt, cache, need_weights)
        return DecoderOutput(self.output(hidden, cache), cache, self_ws, cross_ws)

    def project(self, hidden: Tensor) -> Tensor:
        """Pre-softmax linear map (§3.4), tied to the target embedding by default, plus `logits_bias`
        when the config has one. -> (..., V)."""
        weight = self.decoder.embed.weight if self.output_proj is None else self.output_proj.weight
        return F.linear(hidden, weight, self.logits_bias)

    def output(self, hidden: Tensor, cache: KVCache) -> Tensor:
        """The decoder's final hidden states (B, T, D) -> logits (B, T, V): the projection, or with
        `copy_attention` the log-probabilities of the copy mixture (`modules.copy_attention`)."""
        logits = self.project(hidden)
        return logits if self.copy is None else self.copy(hidden, logits, cache)

    def forward(self, src: Tensor, tgt: Tensor, with_ponder: bool = False):
        """Teacher-forced logits: (B, S), (B, T) -> (B, T, V); with `with_ponder`, (logits, the
        encoder's ponder time) for a loss with ACT halting (`aiayn.tasks.loss.add_ponder_cost`)."""
        enc = self.encode(src)
        logits = self.decode(tgt, self.init_cache(enc, capacity=tgt.shape[1])).logits
        return (logits, enc.ponder) if with_ponder else logits

    # -- the decoding interface (aiayn.decoding.interface) ----------------------------------
    def start(self, src: Tensor, capacity: int = 64) -> KVCache:
        """Encode src (B, S) and return the decoding state, room for `capacity` steps."""
        return self.init_cache(self.encode(src), capacity)

    def step(self, tokens: Tensor, state: KVCache) -> Tensor:
        """tokens (N,): each row's last token -> next-token logits (N, V); `state` grows by one."""
        return self.decode(tokens[:, None], state).logits[:, -1]

    @property
    def max_output_length(self) -> int | None:
        """Learned position tables end at max_positions; sinusoids never end."""
        return self.config.max_positions if self.config.positional == "learned" else None

    @property
    def max_input_length(self) -> int:
        """Longer sources are truncated by the `Translator` (a learned table ends here; sinusoids
        were never trained beyond the lengths such a config is meant for)."""
        return self.config.max_positions

    @torch.inference_mode()
    def attention(self, src: Tensor, tgt_in: Tensor) -> AttentionWeights:
        """Every attention map of one teacher-forced pass: src (B, S), tgt_in (B, T) = BOS + prefix."""
        enc = self.encode(src, need_weights=True)
        out = self.decode(tgt_in, self.init_cache(enc, capacity=tgt_in.shape[1]), need_weights=True)
        return AttentionWeights(enc.attentions, out.self_attentions, out.cross_attentions)

    def fast_decoder(self, precision: str = "fp32") -> FastDecoder:
        """An inference-only view with faster steps (`aiayn.models.fast_decoder`), in fp32, bf16 or
        int8; rebuild it after the weights change."""
        return FastDecoder(self, precision)


def count_parameters(cfg: TransformerConfig) -> int:
    """The analytic parameter count of `Transformer(cfg)`, for checking and for the README."""
    D, F_ = cfg.d_model, cfg.d_ff
    attention = 4 * (D * D + D) + (D if cfg.attention_score == "additive" else 0)  # W^Q, W^K, W^V, W^O (+ w)
    ffn = D * F_ + F_ + F_ * D + D
    norm = 2 * D
    n_enc, n_dec = (1, 1) if cfg.universal else (cfg.n_encoder_layers, cfg.n_decoder_layers)  # universal: one shared layer
    encoder = n_enc * (attention + ffn + 2 * norm) + (D + 1 if cfg.act else 0)  # (+ ACT's halting unit)
    decoder = n_dec * (2 * attention + ffn + 3 * norm)
    final_norms = 2 * norm if cfg.norm_first else 0
    embeddings = cfg.src_vocab_size * D + (0 if cfg.share_embeddings else cfg.tgt_vocab_size * D)
    output = 0 if cfg.tie_output else cfg.tgt_vocab_size * D
    learned = 2 * cfg.max_positions * D if cfg.positional == "learned" else 0
    copy = 2 * (D * D + D) + D + 1 if cfg.copy_attention else 0  # W_q, W_k, the gate
    bias = cfg.tgt_vocab_size if cfg.logits_bias else 0
    return encoder + decoder + final_norms + embeddings + output + learned + copy + bias
