"""Learning-rate schedules over training steps (§5.3, equation 3)."""

from __future__ import annotations

import logging
import math
from types import MappingProxyType
from typing import Callable, Sequence

import numpy as np

from aiayn.config import OptimConfig, TransformerConfig
from aiayn.plots._figure import DEFAULT_SIZE, check_whole, new_figure
from aiayn.training import schedule

log = logging.getLogger(__name__)
TITLES = MappingProxyType({
    "noam": "the paper's schedule (§5.3, eq. 3): factor·d_model^-0.5·min(step^-0.5, step·warmup^-1.5)",
    "inverse_sqrt": "inverse_sqrt: linear warmup to factor, then factor·sqrt(warmup/step)",
    "constant": "constant: linear warmup to factor, then flat",
})
WARMUP_MULTIPLES = 25  # default x range: 25 warmups = the paper's 100k steps for warmup 4000
# Far beyond any training run, yet steps (25 x warmup at most) stay exact in float64 and int64;
# 10^20 steps failed inside numpy, a 400-digit d_model overflowed the float conversion.
MAX_STEPS, MAX_D_MODEL = 10**12, 2**20


def available_schedules() -> dict[str, Callable[..., float]]:
    """name -> lr(step, d_model, warmup_steps, factor): the training module's registry when it
    has one (`SCHEDULES`), else just the paper's schedule."""
    return dict(getattr(schedule, "SCHEDULES", None) or {"noam": schedule.noam_lr})


def lr_curve(fn: Callable[..., float], steps: np.ndarray, d_model: int, warmup: int, factor: float) -> np.ndarray:
    return np.array([fn(int(s), d_model=d_model, warmup_steps=warmup, factor=factor) for s in steps])


def _steps(total: int, points: int = 2000) -> np.ndarray:
    return np.unique(np.linspace(1, total, num=min(points, total)).round().astype(int))


def _variants(name: str, d_model: int, warmup: int) -> list[tuple[int, int]]:
    """(d_model, warmup) settings drawn thin beside the chosen one: half and double the
    warmup, and (for the paper's schedule, the only one using d_model) half d_model."""
    out = [(d_model, max(warmup // 2, 1)), (d_model, 2 * warmup)]
    return out + [(max(d_model // 2, 1), warmup)] if name == "noam" else out


def plot_schedule(
    d_model: int | None = None, warmup: int | None = None, factor: float | None = None,
    total_steps: int | None = None, names: Sequence[str] | None = None, compare: bool = True,
    size: tuple[int, int] = DEFAULT_SIZE,
):
    """LR against step, one panel per named schedule (default: the paper's, "noam").

    Unset values come from the paper defaults in `aiayn.config`. `factor` means what the
    schedule says: a multiplier of d_model^-0.5 for noam, the peak lr for the others, so
    schedules get separate panels. With `compare`, thin curves show other warmups (and half
    d_model for noam): warmup sets where the peak is, noam's peak is factor·(d_model·warmup)^-0.5.
    Returns (figure, {"steps": steps, "<name> d_model=.. warmup=..": lr array, ...}).
    """
    d_model = TransformerConfig().d_model if d_model is None else d_model
    warmup = OptimConfig().warmup_steps if warmup is None else warmup
    factor = OptimConfig().lr_factor if factor is None else factor
    check_whole("d_model", d_model, 1, MAX_D_MODEL)
    check_whole("warmup", warmup, 1, MAX_STEPS)
    if total_steps is not None:
        check_whole("steps", total_steps, 1, MAX_STEPS)
    if not 0 < factor < math.inf:  # NaN fails both
        raise ValueError(f"factor must be a finite number > 0, got {factor}")
    total_steps = WARMUP_MULTIPLES * warmup if total_steps is None else total_steps
    registry = available_schedules()
    names = ["noam"] if names is None else list(names)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"unknown schedule(s) {unknown}; offered: {', '.join(registry)}")
    steps = _steps(total_steps)
    fig = new_figure(size)
    arrays: dict[str, np.ndarray] = {"steps": steps}
    for ax, name in zip(fig.subplots(len(names), 1, squeeze=False)[:, 0], names):
        settings = [(d_model, warmup)] + (_variants(name, d_model, warmup) if compare else [])
        for i, (dm, wu) in enumerate(settings):
            label = f"{name} d_model={dm} warmup={wu}"
            arrays[label] = lr = lr_curve(registry[name], steps, dm, wu, factor)
            ax.plot(steps, lr, label=label, linewidth=2 if i == 0 else 1, alpha=1 if i == 0 else 0.6, zorder=3 - min(i, 1))
        ax.axvline(warmup, color="gray", linestyle=":", linewidth=1)
        ax.set(title=TITLES.get(name, name),
               xlabel="training step (optimizer update)", ylabel=f"learning rate (factor={factor:g})")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.legend(fontsize=8)
    return fig, arrays
