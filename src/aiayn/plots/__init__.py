"""Pictures of the model and its training: each `plot_*` returns (matplotlib Figure, arrays dict).

What they draw of a model is computed below them (`aiayn.decoding.attention_maps`); figures are drawn on the headless Agg canvas (see `_figure`); `save_png` writes one
atomically. The `aiayn plot KIND` command wraps these functions.
"""

from aiayn.plots._figure import new_figure, save_png
from aiayn.plots.attention import draw, plot_attention
from aiayn.plots.complexity import plot_complexity
from aiayn.plots.curves import plot_curves, read_metrics
from aiayn.plots.masks import plot_masks
from aiayn.plots.patches import plot_patch_attention
from aiayn.plots.positional import plot_positional
from aiayn.plots.scaling import plot_scaling, scaling_experiment
from aiayn.plots.schedule import plot_schedule

__all__ = [
    "draw", "new_figure", "plot_attention", "plot_complexity", "plot_patch_attention", "plot_curves", "plot_masks", "plot_positional", "plot_scaling", "plot_schedule",
    "read_metrics", "save_png", "scaling_experiment",
]
