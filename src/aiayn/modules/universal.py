"""The Universal Transformer's recurrence in depth (Dehghani et al., 2019, "Universal Transformers").

One layer is applied `steps` times with the same weights. Before step t (t = 1 .. steps) every
position gets the coordinate embedding P^t = positions + timestep signal (§2.1, eq. 5-7): the
§3.5 sinusoids of the position and of t. So

    H^t = Layer(H^{t-1} + P^t),    H^0 = the token embeddings.

With adaptive computation time (§2.2, Graves 2016), each encoder position has a halting unit
p_t = sigmoid(w·state + b). A position runs until its summed halting probability would pass
1 - ε; at that step its weight is the remainder R = 1 - Σ p, else p_t. As in the paper's own code
(its appendix, and tensor2tensor's), the output is interpolated step by step,
output = w_t · state_t + (1 - w_t) · output, where Graves sums w_t · state_t. Every position's state
keeps being computed until all have halted (the others still attend to it), but a halted
position's output no longer changes. A position's ponder time is its step count plus R; the mean
over real positions goes into the loss (`ponder_cost`, `aiayn.tasks.loss.add_ponder_cost`).
A position that reaches the last step without passing 1 - ε stops there with the weights it has
(their sum below 1) and R = 0, as in the UT code, so the ponder cost gives its halting unit no
gradient (the task loss still does); Graves instead makes the last step take the remainder.

Shapes as in `aiayn.models.transformer`: x (B, S, D); coordinates (S, D) or (B, S, D).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.modules.cache import KVCache
from aiayn.modules.embeddings import sinusoid_table
from aiayn.modules.layers import DecoderLayer, EncoderLayer

ACT_EPSILON = 0.01  # a position halts once its summed halting probability passes 1 - ε (Graves' ε)


class _Steps(nn.Module):
    """What both stacks share: the number of steps and the timestep signal (steps, D)."""

    def __init__(self, d_model: int, steps: int):
        super().__init__()
        self.steps = steps
        self.register_buffer("timesteps", sinusoid_table(steps, d_model, start=1), persistent=False)  # (steps, D)


class UniversalEncoder(_Steps):
    """One `EncoderLayer` applied `steps` times, with optional ACT halting per position."""

    def __init__(self, cfg, steps: int):
        super().__init__(cfg.d_model, steps)
        self.layer = EncoderLayer(cfg)
        self.halt = nn.Linear(cfg.d_model, 1) if cfg.act else None
        if self.halt is not None:
            nn.init.constant_(self.halt.bias, 1.0)  # the UT code's start: halt after a few steps, not at once

    def forward(self, x: Tensor, coords: Tensor, mask: Tensor | None, real: Tensor, need_weights: bool = False):
        """x: embedded inputs (B, S, D); coords: positions (S, D) or (B, S, D); mask: (B, 1, 1, S) or
        None; real: (B, S) bool, the non-pad positions (ACT's ponder time is their mean).

        Returns (states (B, S, D), self-attention weights per step taken or None, ponder time
        (scalar) or None without ACT)."""
        if self.halt is None:
            weights = []
            for t in range(self.steps):
                x, w = self.layer(x + coords + self.timesteps[t], mask, need_weights)
                weights.append(w)
            return x, (weights if need_weights else None), None
        return self._adaptive(x, coords, mask, real, need_weights)

    def _adaptive(self, state: Tensor, coords: Tensor, mask: Tensor | None, real: Tensor, need_weights: bool):
        threshold = 1.0 - ACT_EPSILON
        halting = state.new_zeros(state.shape[:2])  # (B, S) summed halting probability
        remainders, updates = torch.zeros_like(halting), torch.zeros_like(halting)
        done = torch.zeros_like(real)  # (B, S) bool: halted at an earlier step
        output, weights = torch.zeros_like(state), []
        for t in range(self.steps):
            if not bool((real & ~done).any()):
                break
            state = state + coords + self.timesteps[t]
            p = torch.sigmoid(self.halt(state)).squeeze(-1)  # (B, S)
            last = ~done & (halting + p > threshold)  # this step is the position's last: it takes the remainder
            remainder = (1.0 - halting) * last
            share = p * (~done & ~last) + remainder  # (B, S) this step's weight; 0 once halted
            halting, remainders = halting + share, remainders + remainder
            updates = updates + (~done).to(p.dtype)
            done = done | last
            state, w = self.layer(state, mask, need_weights)
            output = state * share.unsqueeze(-1) + output * (1.0 - share.unsqueeze(-1))
            weights.append(w)
        ponder = ((updates + remainders) * real).sum() / real.sum().clamp(min=1)
        return output, (weights if need_weights else None), ponder


class UniversalDecoder(_Steps):
    """One `DecoderLayer` applied `steps` times; step t keeps its keys and values in cache slot t."""

    def __init__(self, cfg, steps: int):
        super().__init__(cfg.d_model, steps)
        self.layer = DecoderLayer(cfg, 0)

    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """The cross-attention keys/values, one pair per step: the same tensors, as the layer is shared."""
        return [self.layer.cross_attn.project_kv(memory)] * self.steps

    def forward(self, x: Tensor, coords: Tensor, cache: KVCache, need_weights: bool = False):
        """x: embedded targets (B, T, D); coords: their positions (T, D). Returns (x, self and cross
        weights per step, or None)."""
        self_ws, cross_ws = [], []
        for t in range(self.steps):
            x, sw, cw = self.layer(x + coords + self.timesteps[t], cache, cache.cross_mask, need_weights, index=t)
            self_ws.append(sw)
            cross_ws.append(cw)
        return x, (self_ws if need_weights else None), (cross_ws if need_weights else None)
