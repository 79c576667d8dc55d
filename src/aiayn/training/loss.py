"""Label-smoothed cross-entropy (§5.4, Szegedy et al. 2016), summed over target tokens.

How the smoothing mass is spread: the target distribution for a token with gold id y is

    q(k) = (1 - ε) · [k = y] + ε / (V - 1)    for every k ≠ pad   (the target included)
    q(pad) = 0

i.e. Szegedy's uniform mixture, taken over the V - 1 non-pad classes: padding never
receives probability mass. Positions whose gold id is pad are ignored entirely.
With ε = 0 this is the ordinary negative log-likelihood.

The functions return SUMS over tokens so the caller can normalise by the number of
target tokens of the whole effective batch (all micro-batches of an update, all ranks).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


class LossSums(NamedTuple):
    loss: Tensor  # scalar, Σ over non-pad tokens of the smoothed cross-entropy
    nll: Tensor  # scalar, Σ over non-pad tokens of -log p(y) (unsmoothed), detached
    n_tokens: int  # non-pad target tokens


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> LossSums:
    """Smoothed cross-entropy summed over the non-pad positions of `target`.

    Shape:
        logits: (B, T, V) or (N, V), any float dtype (computed in fp32);
        target: (B, T) or (N,) gold ids, `pad_id` at padding positions.
    """
    V = logits.shape[-1]
    lprobs = F.log_softmax(logits.float().reshape(-1, V), dim=-1)  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id  # (N,)
    lprobs, target = lprobs[keep], target[keep]  # (n, V), (n,)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (n,)
    # Σ_{k≠pad} -log p(k): the uniform part, pad column excluded
    uniform = -(lprobs.sum(-1) - lprobs[:, pad_id])  # (n,)
    loss = (1.0 - epsilon) * nll + (epsilon / (V - 1)) * uniform
    return LossSums(loss.sum(), nll.detach().sum(), int(keep.sum()))
