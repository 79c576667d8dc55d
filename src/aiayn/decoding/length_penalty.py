"""Length penalties for beam search scores: score(Y) = log P(Y | X) / lp(|Y|).

Two forms (`DecodeConfig.length_penalty_form`):
    "gnmt"  lp(n) = ((5 + n) / 6) ** α   Wu et al. (2016), the paper's choice (§6.1, α = 0.6)
    "plain" lp(n) = n ** α               fairseq, Hugging Face and CTranslate2

|Y| = n counts the generated tokens **including the final EOS** (BOS is never counted).
A hypothesis cut by the maximum length has no EOS and counts its tokens only.
Both forms are non-decreasing in n for α >= 0, which the early-stopping bound relies on.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.config import LENGTH_PENALTY_FORMS as FORMS


def length_penalty(length: Tensor | int | float, alpha: float, form: str) -> Tensor:
    """lp(|Y|) elementwise; `length` in tokens, EOS included."""
    n = torch.as_tensor(length, dtype=torch.float32)
    if form == "gnmt":
        return ((5.0 + n) / 6.0) ** alpha
    if form == "plain":
        return n**alpha
    raise ValueError(f"length penalty form must be one of {FORMS}, got {form!r}")
