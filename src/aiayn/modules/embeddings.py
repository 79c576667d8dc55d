"""Token embeddings (§3.4) and positional encodings (§3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def normal_init_(weight: Tensor, std: float) -> None:
    """N(0, std²) in place; nothing on the meta device, where `aiayn.models.load_model` builds a model whose
    every tensor then comes from its file (torch's meta `normal_` first imports its Python reference ops:
    a second of a fresh process's load time)."""
    if not weight.is_meta:
        nn.init.normal_(weight, mean=0.0, std=std)


class Embeddings(nn.Module):
    """Token embedding multiplied by sqrt(d_model) (§3.4; `scale=False` leaves it out).

    Initialised N(0, d_model^-0.5), so scaled embeddings start with unit variance and the
    tied pre-softmax projection starts with small logits.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, scale: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.pad_id = pad_id
        normal_init_(self.weight, d_model**-0.5)
        with torch.no_grad():
            self.weight[pad_id].zero_()

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, T) long -> (B, T, D)."""
        return nn.functional.embedding(tokens, self.weight, self.pad_id) * self.scale


def sinusoid_table(length: int, d_model: int, start: int = 0, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (§3.5).

    `layout="halves"` holds the same values with every sine first: PE(pos, i) = sin(pos / 10000^(2i/d)),
    PE(pos, ⌈d/2⌉ + i) = cos(...) (Marian's and CTranslate2's layout).
    Returns (length, d_model) in float32 for positions start .. start + length - 1.
    """
    cpu = torch.device("cpu")  # also while a model is built on the meta device (`aiayn.models.load_model`)
    pos = torch.arange(start, start + length, dtype=torch.float64, device=cpu)[:, None]  # (T, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=cpu) / d_model)  # (D/2,)
    angles = pos * inv_freq  # (T, D/2)
    table = torch.zeros(length, d_model, dtype=torch.float64, device=cpu)
    if layout == "halves":
        half = angles.shape[1]  # ⌈D/2⌉
        table[:, :half] = torch.sin(angles)
        table[:, half:] = torch.cos(angles[:, : d_model - half])
        return table.float()
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids (§3.5). Valid for any position: positions past the precomputed table
    are computed for that call (the module is never modified, so concurrent calls are safe)."""

    def __init__(self, d_model: int, initial_length: int = 1024, layout: str = "interleaved"):
        super().__init__()
        self.d_model, self.layout = d_model, layout
        self.register_buffer("table", sinusoid_table(initial_length, d_model, layout=layout), persistent=False)

    def forward(self, length: int, start: int = 0) -> Tensor:
        """Encodings for positions start .. start + length - 1: (length, D)."""
        end = start + length
        if end > self.table.shape[0]:
            return sinusoid_table(length, self.d_model, start, self.layout).to(self.table.device)
        return self.table[start:end]


class LearnedPositionalEncoding(nn.Module):
    """A learned table of `max_positions` vectors, the alternative that §3.5 compares against."""

    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        normal_init_(self.weight, d_model**-0.5)

    def forward(self, length: int, start: int = 0) -> Tensor:
        """Encodings for positions start .. start + length - 1: (length, D)."""
        end = start + length
        if end > self.weight.shape[0]:
            raise ValueError(
                f"position {end - 1} is beyond the learned table (max_positions={self.weight.shape[0]}); "
                "use positional='sinusoidal' or a larger max_positions"
            )
        return self.weight[start:end]


def positional_encoding(kind: str, d_model: int, max_positions: int, layout: str = "interleaved") -> nn.Module:
    """"learned" (a table of max_positions rows) or "sinusoidal" (§3.5, extends on demand; `layout`
    as `sinusoid_table` reads it)."""
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_positions)
    return SinusoidalPositionalEncoding(d_model, max_positions, layout)
