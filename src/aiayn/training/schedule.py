"""Learning-rate schedules. The paper's (§5.3) is the default."""

from __future__ import annotations


def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) (§5.3, eq. 3).

    Rises linearly for `warmup_steps` updates, then decays as 1/sqrt(step). Steps count
    from 1 (the first update); step 0 is treated as step 1.
    """
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
