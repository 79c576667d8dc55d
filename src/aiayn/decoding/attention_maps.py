"""What a model attends to: the attention maps of one translation, as the model computed them (§3.2,
Figure 3-5 of the paper), of one text through a one-stack model, and a ViT's [CLS] over its patches.
`aiayn.plots` draws them; a pipeline's `attention` and /v1/translate's `return_attention` compute them.

`decode_with_attention` translates greedily through the decoding interface (the same
`greedy_search` as everywhere) and then asks the model for the attention of that output
(`model.attention`, one teacher-forced pass): encoder self-attention, decoder masked
self-attention and encoder-decoder (cross) attention, for every layer and head. Causal
masking makes the teacher-forced pass compute exactly what the incremental steps did; the
tests check the two agree.

Axis conventions of the returned maps (T = number of generated tokens, EOS included):
    decoder row t is the decoder position whose input is `in_labels[t]` (BOS, y1, ..)
    and which predicts `out_labels[t]` (y1, .., EOS).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from aiayn.config import BOS_ID, EOS_ID
from aiayn.decoding.common import output_limits
from aiayn.decoding.greedy import greedy_search
from aiayn.models.base import eval_mode
from aiayn.modules.sentences import sentence_index

PARTS = ("encoder", "decoder", "cross")
TITLES = MappingProxyType({"encoder": "encoder self-attention", "decoder": "decoder masked self-attention",
          "cross": "encoder-decoder attention"})


@dataclass(frozen=True)
class AttentionMaps:
    """Attention weights of one translated sentence, as numpy float32 arrays.

    encoder: (L_enc, H, S, S); decoder: (L_dec, H, T, T); cross: (L_dec, H, T, S).
    """

    src_ids: list[int]
    out_ids: list[int]  # generated ids; the last is EOS unless the length limit was hit
    encoder: np.ndarray
    decoder: np.ndarray
    cross: np.ndarray
    src_labels: list[str]
    in_labels: list[str]  # decoder inputs: BOS + out_ids[:-1]
    out_labels: list[str]  # predictions: out_ids

    def part(self, name: str) -> np.ndarray:
        if name not in PARTS:
            raise ValueError(f"unknown attention part {name!r}; choose from {', '.join(PARTS)}")
        weights = getattr(self, name)
        if weights.shape[0] == 0:
            have = [p for p in PARTS if getattr(self, p).shape[0]]
            raise ValueError(f"this model has no {TITLES[name]}; it has: {', '.join(have)}")
        return weights

    def describe(self) -> str:
        lines = [f"source: {' '.join(self.src_labels)}"]
        if self.out_labels and self.cross.shape[0]:
            lines.append(f"output: {' '.join(self.out_labels)}")
        return "\n".join(lines)

    def labels(self, name: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a part's heatmaps."""
        return {"encoder": (self.src_labels, self.src_labels),
                "decoder": (self.in_labels, self.in_labels),
                "cross": (self.out_labels, self.src_labels)}[name]


# -- translations --------------------------------------------------------------------
def _stack(per_layer: list[Tensor]) -> np.ndarray:
    """Per layer (1, H, Tq, Tk) -> (L, H, Tq, Tk) float32; (0, 0, 0, 0) for a model without that part."""
    if not per_layer:
        return np.zeros((0, 0, 0, 0), dtype=np.float32)
    return torch.cat(per_layer, dim=0).float().cpu().numpy()


@torch.inference_mode()
def decode_with_attention(
    model, src_ids: Sequence[int], max_len_a: float | None = None, max_len_b: int | None = None,
) -> AttentionMaps:
    """Greedy translation of one sentence and the attention maps of that translation.

    `src_ids` follow `aiayn.decoding.common.encode_source` (ids + EOS). Labels are left as
    ids rendered with str(); `attention_for_sentence` fills in subword pieces.
    """
    with eval_mode(model):
        src = torch.tensor([list(src_ids)], dtype=torch.long, device=next(model.parameters()).device)  # (1, S)
        out_ids = with_end(model, src, greedy_search(model, src, max_len_a, max_len_b)[0], max_len_a, max_len_b)
        in_ids = [BOS_ID, *out_ids[:-1]]
        weights = model.attention(src, torch.tensor([in_ids], device=src.device))  # teacher-forced, (1, T)
    return AttentionMaps(
        list(src_ids), out_ids, _stack(weights.encoder), _stack(weights.decoder), _stack(weights.cross),
        [str(i) for i in src_ids], [str(i) for i in in_ids], [str(i) for i in out_ids],
    )


def with_end(model, src: Tensor, tokens: list[int], max_len_a, max_len_b) -> list[int]:
    """The generated ids with the EOS that ended them, unless the length limit did."""
    limit = int(output_limits(model, src, max_len_a, max_len_b)[0])
    return tokens + [EOS_ID] if len(tokens) < limit else tokens


@torch.inference_mode()
def forward_attention(model, src: Tensor, tgt_in: Tensor) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Attention of one teacher-forced pass: src (B, S), tgt_in (B, T) (BOS + prefix).

    Returns per layer: encoder (B, H, S, S), decoder self (B, H, T, T), cross (B, H, T, S).
    """
    with eval_mode(model):
        w = model.attention(src, tgt_in)
    return w.encoder, w.decoder, w.cross


def attention_maps(model, tokenizers, src_ids: Sequence[int], max_len_a: float | None = None,
                   max_len_b: int | None = None) -> AttentionMaps:
    """`decode_with_attention` of `src_ids` (ids + EOS, cut as the caller's door cuts them), with the
    subword pieces as labels. A task's pipeline calls this (`Pipeline.attention`)."""
    maps = decode_with_attention(model, src_ids, max_len_a, max_len_b)
    src_labels = tokenizers.src.pieces(maps.src_ids)
    if getattr(model.config, "source_units", "tokens") == "sentences":  # the encoder's units are sentences
        src_labels = sentence_labels(src_labels, maps.src_ids, model.config.sentence_ends)
    return AttentionMaps(
        maps.src_ids, maps.out_ids, maps.encoder, maps.decoder, maps.cross,
        src_labels, tokenizers.tgt.pieces([BOS_ID, *maps.out_ids[:-1]]), tokenizers.tgt.pieces(maps.out_ids),
    )


def sentence_labels(pieces: Sequence[str], ids: Sequence[int], ends: Sequence[int], width: int = 28) -> list[str]:
    """One label per sentence, the pieces grouped by `aiayn.modules.sentences.sentence_index` (as the
    encoder pools them). Labels over `width` characters are shortened."""
    src = torch.tensor([list(ids)])
    index = sentence_index(src, torch.tensor(list(ends)), torch.ones_like(src, dtype=torch.bool))[0].tolist()
    groups: list[list[str]] = [[] for _ in range(max(index, default=-1) + 1)]
    for piece, i in zip(pieces, index):
        groups[i].append(piece)
    labels = [" ".join(g) for g in groups]
    return [t if len(t) <= width else t[: width - 1] + "…" for t in labels]


@torch.inference_mode()
def self_attention_maps(model, tokenizer, text: str, part: str, first: Sequence[tuple[str, int]] = ()) -> AttentionMaps:
    """The self-attention of a one-stack model over `text`, drawn as `part`: "decoder" (causal, GPT)
    or "encoder" (bidirectional, BERT). `first`: (label, id) of positions the model puts before the
    text itself (BERT's [CLS]). Nothing is generated."""
    ids = tokenizer.encode(text)
    if not ids:
        raise ValueError("the text is empty")
    with eval_mode(model):
        weights = _stack(model.attention(torch.tensor([ids], device=next(model.parameters()).device)))
    labels = [label for label, _ in first] + tokenizer.pieces(ids)
    ids = [i for _, i in first] + ids
    empty = _stack([])
    return AttentionMaps(ids, [], weights if part == "encoder" else empty, weights if part == "decoder" else empty,
                         empty, labels, labels, labels)


def default_part(maps: AttentionMaps) -> str:
    """Cross-attention when the model has it, else its one self-attention."""
    return next(p for p in ("cross", "encoder", "decoder") if getattr(maps, p).shape[0])


# -- a ViT's [CLS] over its patches ----------------------------------------------------------------
@dataclass(frozen=True)
class PatchAttention:
    """Where a ViT's [CLS] token looks: its attention to each image patch, per layer (seed 004 §11). Row 0
    of an encoder-only model's self-attention is what [CLS] attends to; columns 1.. are the patches in
    row-major order, so each layer's row reshapes to the patch grid and can be laid over the image."""

    image: np.ndarray  # (H, W) pixels in [0, 1]
    cls: np.ndarray  # (L, heads, N): [CLS] -> patch weights; each (layer, head) row sums to 1 with the [CLS] column
    patch_size: int
    label: str
    prediction: str
    probability: float

    def describe(self) -> str:
        return f"label {self.label}, predicted {self.prediction} ({self.probability:.0%})"

    def grid(self, layer: int, head: int | None = None) -> np.ndarray:
        """(H/p, W/p) weights of one head, or the heads' mean when head is None."""
        weights = self.cls[layer].mean(0) if head is None else self.cls[layer, head]
        side = self.image.shape[0] // self.patch_size
        return weights.reshape(side, self.image.shape[1] // self.patch_size)


@torch.inference_mode()
def patch_attention(model, image: np.ndarray, patch_size: int, patches: np.ndarray, labels: list[str],
                    label: str) -> PatchAttention:
    """[CLS]'s attention to each patch of `image` (H, W), whose patches (N, p²) the model reads, and
    the model's prediction among `labels`; `label` is the image's own."""
    x = torch.from_numpy(patches[None])  # (1, N, p²)
    with eval_mode(model):
        weights = torch.stack([w[0, :, 0, 1:] for w in model.attention(x)])  # (L, heads, N)
        probs = model.classify(x)[0].float().softmax(-1)
    return PatchAttention(image, weights.numpy(), patch_size, label, labels[int(probs.argmax())], float(probs.max()))
