"""The encoder-only Transformer: BERT (Devlin et al., 2019) and, with patches as tokens, ViT
(Dosovitskiy et al., 2021); seed 004 §11's bidirectional descendants.

The body is the paper's encoder stack (§3.1, `aiayn.modules.layers.EncoderLayer`): no causal
mask, every position sees every other. A [CLS] position comes first; its final state is the
summary a classifier reads.

    input = "tokens"   token embeddings (§3.4) + positions; [CLS] is the BOS id, which no text
                       contains, so a vocabulary needs no extra piece for it
    input = "patches"  a linear map of flattened image patches (ViT §3.1), a learned [CLS]
                       vector, learned positions

Heads:
    mlm_logits   masked-language-model pre-training: dense + GELU + LayerNorm, then the
                 projection tied to the token embedding (BERT §3.1, Appendix A), + `logits_bias`
    classify     a linear map of the [CLS] state to `n_classes` scores (with `pooler`: of
                 tanh(dense([CLS] state)), BERT's pooler)

BERT's own options: `embedding_norm` (a LayerNorm over the summed embeddings), `type_vocab_size`
(token-type embeddings; all tokens are of type 0 here), `scale_embeddings = False`.

Shape: tokens (B, T) ids, PAD on the right | patches (B, N, patch_dim) floats
    hidden (B, 1 + T, D); mlm_logits (B, T, V); classify (B, n_classes)
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.config import BOS_ID, PAD_ID, UNK_ID, ConfigError, LayerOptions, RecurrenceOptions, check_types
from aiayn.models.base import ModelConfig, PretrainedModel
from aiayn.modules import masks
from aiayn.modules.dropout import Dropout
from aiayn.modules.embeddings import Embeddings, positional_encoding
from aiayn.modules.layers import ACTIVATION_FUNCTIONS, EncoderLayer
from aiayn.modules.universal import UniversalEncoder

CLS_ID = BOS_ID  # the [CLS] position's token: BOS, which no tokenized text contains


@dataclass(frozen=True)
class EncoderOnlyConfig(ModelConfig, RecurrenceOptions, LayerOptions):
    """BERT or ViT. `n_classes` > 0 adds the classifier head; `input` picks tokens or patches.
    `recurrence = "universal"` (`RecurrenceOptions`) makes the stack one layer applied again and again."""

    vocab_size: int = 8000  # tokens only
    n_layers: int = 4
    d_model: int = 256  # LayerOptions' (the paper's base) restated where an encoder-only model differs
    n_heads: int = 4
    d_ff: int = 1024
    positional: str = "learned"  # BERT's and ViT's; BERT is post-norm as the paper, ViT pre-norm (norm_first)
    max_positions: int = 128  # [CLS] included
    n_classes: int = 0  # > 0: a classification head on [CLS]
    pooling: str = "cls"  # what the classifier reads: "cls" (BERT, ViT) or "mean" of [CLS] and the real inputs
    input: str = "tokens"  # "tokens" | "patches"
    patch_dim: int = 0  # patches: values per flattened patch (channels · height · width)
    embedding_norm: bool = False  # a LayerNorm over embeddings + positions (+ token types), as BERT has
    type_vocab_size: int = 0  # > 0: BERT's token-type (segment) embeddings; every input token is of type 0
    pooler: bool = False  # the classifier reads tanh(dense([CLS] state)), BERT's pooler (a BERT body may carry it unused)

    # what a run started from another model's directory (`train.init_from`) sets itself: the heads
    head_fields: ClassVar[tuple[str, ...]] = ("n_classes", "pooling", "pooler", "logits_bias")

    def __post_init__(self) -> None:
        check_types(type(self), vars(self))
        self.check_positive("n_layers")
        if self.input not in ("tokens", "patches"):
            raise ConfigError(f"input must be 'tokens' or 'patches', got {self.input!r}")
        if self.input == "patches" and (self.patch_dim <= 0 or self.positional != "learned"):
            raise ConfigError("input = 'patches' needs patch_dim > 0 and learned positions")
        if self.input == "tokens" and self.vocab_size <= UNK_ID:
            raise ConfigError(f"vocab_size must hold the {UNK_ID + 1} special ids, got {self.vocab_size}")
        if self.n_classes < 0:
            raise ConfigError(f"n_classes must be >= 0, got {self.n_classes}")
        if self.pooling not in ("cls", "mean"):
            raise ConfigError(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")
        self.check_layers()
        if self.type_vocab_size < 0 or (self.type_vocab_size and self.input != "tokens"):
            raise ConfigError(f"type_vocab_size must be >= 0, and 0 for patches; got {self.type_vocab_size}")
        if self.pooler and self.pooling != "cls":
            raise ConfigError("pooler reads the [CLS] state: it needs pooling = 'cls'")
        if self.logits_bias and self.input == "patches":
            raise ConfigError("logits_bias belongs to the MLM head, which input = 'patches' has not")
        self.check_recurrence()



class EncoderOnly(PretrainedModel):
    """BERT / ViT: the encoder stack over [CLS] + inputs, with an MLM head and a classifier head."""

    model_type = "encoder-only"
    config_class = EncoderOnlyConfig

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__(config)
        cfg = config
        if cfg.input == "tokens":
            self.embed = Embeddings(cfg.vocab_size, cfg.d_model, PAD_ID, cfg.scale_embeddings)
        else:
            self.patch_proj = nn.Linear(cfg.patch_dim, cfg.d_model)
            self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model))
        self.positions = positional_encoding(cfg.positional, cfg.d_model, cfg.max_positions)
        # registered only when asked for, so that the parameter order of older checkpoints holds
        self.token_types = nn.Parameter(torch.zeros(cfg.type_vocab_size, cfg.d_model)) if cfg.type_vocab_size else None
        self.embed_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.embedding_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.layers = None if cfg.universal else nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.universal = UniversalEncoder(cfg, cfg.steps(cfg.n_layers)) if cfg.universal else None
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None
        if cfg.input == "tokens":  # the MLM transform; its output projection is the tied embedding
            self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
            self.mlm_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes) if cfg.n_classes else None
        self.pool = nn.Linear(cfg.d_model, cfg.d_model) if cfg.pooler else None
        self.logits_bias = nn.Parameter(torch.zeros(cfg.vocab_size)) if cfg.logits_bias else None  # (V,)
        self.act = ACTIVATION_FUNCTIONS[cfg.activation]

    def _inputs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """[CLS] + embedded inputs (B, 1 + T, D) with positions (a universal stack adds them at every
        step instead), the positions (1 + T, D) and the real (non-pad) positions (B, 1 + T) bool."""
        if self.config.input == "patches":  # x: (B, N, patch_dim)
            h = torch.cat([self.cls.expand(x.shape[0], -1, -1), self.patch_proj(x)], dim=1)
            real = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
        else:  # x: (B, T) ids
            ids = torch.cat([torch.full_like(x[:, :1], CLS_ID), x], dim=1)
            h, real = self.embed(ids), masks.padding_mask(ids, PAD_ID)
        if h.shape[1] > self.config.max_positions and self.config.positional == "learned":
            raise ValueError(f"{h.shape[1]} positions ([CLS] included) exceed max_positions {self.config.max_positions}")
        positions = self.positions(h.shape[1])  # (1 + T, D)
        if self.universal is None:
            h = h + positions
        if self.token_types is not None:
            h = h + self.token_types[0]  # one segment: every token is of type 0
        if self.embed_norm is not None:
            h = self.embed_norm(h)
        return self.dropout(h), positions, real

    def encode(self, x: Tensor, need_weights: bool = False):
        """Final states (B, 1 + T, D) ([CLS] first), the self-attention per layer (or step) when asked
        (else None), and the ponder time with ACT halting (else None)."""
        h, positions, real = self._inputs(x)
        keep = None if bool(real.all()) else masks.key_mask(real)  # (B, 1, 1, 1 + T)
        ponder = None
        if self.universal is not None:
            h, weights, ponder = self.universal(h, positions, keep, real, need_weights)
        else:
            weights = []
            for layer in self.layers:
                h, w = layer(h, keep, need_weights)
                weights.append(w)
        if self.final_norm is not None:
            h = self.final_norm(h)
        return h, (weights if need_weights else None), ponder

    def forward(self, x: Tensor, need_weights: bool = False, head: str = "states", **options):
        """Final states (B, 1 + T, D) ([CLS] first), and the self-attention per layer when asked; or with
        `head = "classify"` or `"mlm"`, what `classify` or `mlm_logits` returns (with `options`). The
        training losses go through here: DistributedDataParallel synchronises calls of forward only."""
        if head != "states":
            heads = {"classify": self.classify, "mlm": self.mlm_logits}
            if head not in heads:
                raise ValueError(f"head must be 'states', 'classify' or 'mlm', got {head!r}")
            return heads[head](x, **options)
        h, weights, _ = self.encode(x, need_weights)
        return (h, weights) if need_weights else h

    def mlm_logits(self, tokens: Tensor, chosen: Optional[Tensor] = None, with_ponder: bool = False):
        """(B, T) ids (some replaced by [MASK]) -> (B, T, V) scores of the original token at each position,
        or, with `chosen` (B, T) bool, (M, V) at the M chosen positions only, in row-major order: the
        output projection, the largest matrix product of a small model, then runs on the ~15% that count.
        With `with_ponder`: (scores, ponder time or None)."""
        h, _, ponder = self.encode(tokens)
        h = h[:, 1:]  # (B, T, D)
        if chosen is not None:
            h = h[chosen]  # (M, D)
        scores = F.linear(self.mlm_norm(self.mlm_act(self.mlm_dense(h))), self.embed.weight, self.logits_bias)
        return (scores, ponder) if with_ponder else scores

    def mlm_act(self, x: Tensor) -> Tensor:
        """The MLM transform's activation: GELU (BERT's), or the FFN's when it is not ReLU (BERT uses
        its `hidden_act` in both places)."""
        return F.gelu(x) if self.config.activation == "relu" else self.act(x)

    def classify(self, x: Tensor, with_ponder: bool = False):
        """(B, T) ids or (B, N, patch_dim) patches -> (B, n_classes) scores from the [CLS] state, or from
        the mean of the final states over [CLS] and the real (non-pad) inputs (`pooling = "mean"`).
        With `with_ponder`: (scores, ponder time or None)."""
        if self.classifier is None:
            raise ValueError("this model has no classifier head (n_classes = 0)")
        h, _, ponder = self.encode(x)  # (B, 1 + T, D)
        scores = self.classifier(self._pooled(h, x))
        return (scores, ponder) if with_ponder else scores

    def _pooled(self, h: Tensor, x: Tensor) -> Tensor:
        """(B, 1 + T, D) final states -> (B, D), what the classifier reads."""
        if self.pool is not None:  # BERT's pooler, and the dropout BertForSequenceClassification puts after it
            return self.dropout(torch.tanh(self.pool(h[:, 0])))
        if self.config.pooling == "cls":
            return h[:, 0]
        real = torch.ones(h.shape[:2], dtype=h.dtype, device=h.device)  # (B, 1 + T)
        if self.config.input == "tokens":
            real[:, 1:] = (x != PAD_ID).to(h.dtype)
        return (h * real[:, :, None]).sum(1) / real.sum(1, keepdim=True)

    @torch.inference_mode()
    def attention(self, x: Tensor) -> list[Tensor]:
        """Self-attention maps per layer (B, H, 1 + T, 1 + T); row 0 is what [CLS] attends to."""
        return self(x, need_weights=True)[1]
