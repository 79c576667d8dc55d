"""Label-smoothed cross-entropy (§5.4, Szegedy et al. 2016), summed over target tokens.

How the smoothing mass is spread: the target distribution for a token with gold id y is

    q(k) = (1 - ε) · [k = y] + ε / (V - 1)    for every k ≠ pad   (the target included)
    q(pad) = 0

i.e. Szegedy's uniform mixture, taken over the V - 1 non-pad classes: padding never
receives probability mass. Positions whose gold id is pad are ignored entirely.
With ε = 0 this is the ordinary negative log-likelihood.

The loss is computed from the logits without materialising log p: with lse = log Σ exp z,

    -Σ_k q(k) log p(k) = lse - (1 - ε) · z_y - ε / (V - 1) · (Σ_k z_k - z_pad)

and its gradient is softmax(z) - q, written by hand (`_SmoothedCrossEntropy`) so that
backward is a few passes over the (N, V) logits instead of autograd's chain of
log_softmax, gather, sum and index. On the 8k-vocabulary Multi30k batches this halves
the loss's share of a training step.

A classifier's C classes hold no pad class, so `class_smoothed_loss` spreads ε over all of them:
q(k) = (1 - ε) · [k = y] + ε / C, the same mixture over the classes a target can take (what
PyTorch's `label_smoothing` computes).

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
    with torch.autocast(logits.device.type, enabled=False):  # under bf16/fp16 autocast too, the loss is fp32
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)).reshape(-1, V)  # (N, V), fp32 at least
        target = target.reshape(-1)  # (N,)
        keep = target != pad_id  # (N,)
        loss, nll = _SmoothedCrossEntropy.apply(logits, target, keep, epsilon, pad_id)
    return LossSums(loss, nll.detach(), int(keep.sum()))


def class_smoothed_loss(scores: Tensor, targets: Tensor, epsilon: float) -> LossSums:
    """Smoothed cross-entropy of a classifier, summed over the batch (ε / C on each class, see above).

    Shape:
        scores: (B, C) class logits, any float dtype (computed in fp32); targets: (B,) class ids.
    """
    scores = scores.float()  # (B, C)
    loss = F.cross_entropy(scores, targets, reduction="sum", label_smoothing=epsilon)
    nll = F.cross_entropy(scores.detach(), targets, reduction="sum")
    return LossSums(loss, nll, targets.numel())


class _SmoothedCrossEntropy(torch.autograd.Function):
    """(N, V) logits, (N,) targets, (N,) keep mask -> (Σ smoothed loss, Σ nll) over the kept rows;
    the nll sum is not differentiable (it is reported, not trained on)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, epsilon: float, pad_id: int):
        V = logits.shape[-1]
        keep = keep.to(logits.dtype)  # (N,)
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        nll = lse - logits.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        uniform = (V - 1) * lse - (logits.sum(-1) - logits[:, pad_id])  # (N,) Σ_{k≠pad} -log p(k)
        loss = (1.0 - epsilon) * nll + (epsilon / (V - 1)) * uniform
        ctx.save_for_backward(logits, target, lse, keep)
        ctx.epsilon, ctx.pad_id = epsilon, pad_id
        ctx.mark_non_differentiable(nll)
        real = keep.bool()  # selected, not multiplied: a non-finite logit at a pad position (0 · inf) stays out
        return torch.where(real, loss, 0.0).sum(), torch.where(real, nll, 0.0).sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        logits, target, lse, keep = ctx.saved_tensors
        eps, pad_id, V = ctx.epsilon, ctx.pad_id, logits.shape[-1]
        grad = torch.sub(logits, lse.unsqueeze(1)).exp_()  # (N, V) softmax
        grad.sub_(eps / (V - 1))  # - q on the uniform part ...
        grad[:, pad_id] += eps / (V - 1)  # ... which skips pad
        grad.scatter_add_(1, target.unsqueeze(1), torch.full_like(lse, eps - 1.0).unsqueeze(1))  # - (1-ε) at y
        grad.masked_fill_(~keep.bool().unsqueeze(1), 0.0).mul_(grad_loss)  # pad rows get no gradient, not even NaN
        return grad, None, None, None, None


def ponder_weight(model) -> float:
    """The weight of ACT's ponder cost for `model` (or its DDP wrapper): its config's `ponder_cost`
    with `halting = "act"`, else 0 (the model then returns no ponder time)."""
    config = getattr(model, "module", model).config
    return config.ponder_cost if getattr(config, "act", False) else 0.0


def add_ponder_cost(sums: LossSums, ponder: Tensor | None, weight: float) -> LossSums:
    """ACT's ponder cost (Graves 2016, eq. 14; Universal Transformers §2.2) added to a summed loss:
    `weight` times the mean ponder time per target, so that after the trainer divides by the number
    of targets it is `weight` times the mean ponder time. The reported NLL stays the plain one.
    `ponder` None (no ACT): `sums` as they are."""
    if ponder is None or not weight:
        return sums
    return sums._replace(loss=sums.loss + weight * ponder * sums.n_tokens)
