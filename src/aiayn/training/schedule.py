"""The optimiser and learning-rate schedules of §5.3. The paper's schedule is the default.

Every schedule has the signature `fn(step, d_model, warmup_steps, factor) -> lr` and is
evaluated once per optimizer update (not per micro-batch); steps count from 1.
`SCHEDULES` maps the names a config may use to these functions.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

if TYPE_CHECKING:
    import torch

    from aiayn.config import OptimConfig

Schedule = Callable[[int, int, int, float], float]


def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) (§5.3, eq. 3).

    Rises linearly for `warmup_steps` updates, then decays as 1/sqrt(step). Steps count
    from 1 (the first update); step 0 is treated as step 1.
    """
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """fairseq's `inverse_sqrt`: linear warmup to a peak of `factor` (an absolute lr), then
    factor · sqrt(warmup / step). Same shape as noam, but the peak ignores d_model."""
    step = max(step, 1)
    return factor * min(step / warmup_steps, (warmup_steps / step) ** 0.5)


def constant_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Linear warmup to `factor` (an absolute lr), then constant."""
    step = max(step, 1)
    return factor * min(1.0, step / warmup_steps)


SCHEDULES: Mapping[str, Schedule] = MappingProxyType({
    "noam": noam_lr,
    "inverse_sqrt": inverse_sqrt_lr,
    "constant": constant_lr,
})


def get_schedule(name: str) -> Schedule:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose from {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def lr_function(name: str, d_model: int, warmup_steps: int, factor: float) -> Callable[[int], float]:
    """step -> lr of schedule `name` for a model of width `d_model` (what the trainer is given)."""
    schedule = get_schedule(name)
    return lambda step: schedule(step, d_model, warmup_steps, factor)


def adam(params: Iterable[torch.nn.Parameter], optim: OptimConfig, lr: float,
         fused: bool | None = None) -> torch.optim.Optimizer:
    """Adam with the paper's betas and eps (§5.3) as `optim` sets them. Weight decay, where set, is
    decoupled from the gradient (AdamW, Loshchilov & Hutter 2019: each update shrinks a weight by
    lr · weight_decay) and acts on every parameter: BERT's fine-tuning also exempts biases and
    LayerNorm gains, which this does not (the Multi30k copy recipe's 0.05 was chosen this way).
    With the default 0 this is the paper's Adam."""
    import torch  # here, so that reading a config does not load torch

    return torch.optim.Adam(params, lr=lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay,
                            decoupled_weight_decay=True, fused=fused)
