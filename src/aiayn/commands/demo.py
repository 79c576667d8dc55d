"""`aiayn demo`: learn a synthetic task (copy, reverse or sort) offline with the full training
pipeline and the recipe `recipes/demo.toml`, then decode held-out examples and draw the
cross-attention of one."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

HELP = "train a small Transformer on a synthetic task, offline, and decode held-out examples"
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.toml"
N_TEST = 500  # held-out examples scored at the end
TEST_SEED_OFFSET = 2  # synthetic splits: train seed, valid seed + 1, test seed + 2 (tasks.translation.synthetic_text)
DEMO_MARK = ".aiayn-demo"  # in a run directory the demo made: only such a run is cleared by the next demo


@dataclass
class DemoResult:
    accuracy: float  # exact match, greedy
    seconds: float
    model_dir: Path
    examples: list[tuple[str, str, str]]  # (source, reference, hypothesis)


def demo_config(out_dir: str | Path, overrides: Sequence[str] = ()):
    """The recipe's `TrainConfig`, with `--set` overrides, training into `out_dir`."""
    from aiayn.training.config import load_config, string_override

    if any(o.strip().startswith("train.run_dir") for o in overrides):
        raise ValueError("--set train.run_dir: the demo trains into --output")

    return load_config(RECIPE, [*overrides, string_override("train.run_dir", out_dir)])


def run_demo(out_dir: str | Path, overrides: Sequence[str] = (), n_test: int = N_TEST,
             progress: Optional[Callable] = None) -> DemoResult:
    """Train into `out_dir` (the model lands in `out_dir/model`), then decode `n_test`
    held-out examples greedily and score exact match."""
    from aiayn.data.synthetic import synthetic_pairs
    from aiayn.tasks import load_pipeline
    from aiayn.training.checkpoint import MODEL_DIR
    from aiayn.training.pipeline import train

    start = time.perf_counter()
    cfg = demo_config(out_dir, overrides)
    _clear_previous_run(Path(out_dir))
    train(cfg, progress=progress)
    model_dir = Path(out_dir) / MODEL_DIR
    d = cfg.data
    test = synthetic_pairs(d.task, n_test, seed=cfg.train.seed + TEST_SEED_OFFSET, n_symbols=d.n_symbols,
                           min_len=d.min_len, max_len=d.max_len)
    hyps = load_pipeline(model_dir)([s for s, _ in test], method="greedy")
    accuracy = sum(h == t for h, (_, t) in zip(hyps, test)) / len(test)
    examples = [(s, t, h) for (s, t), h in zip(test, hyps)]
    return DemoResult(accuracy, time.perf_counter() - start, model_dir, examples)


def _clear_previous_run(out_dir: Path) -> None:
    """The demo always starts afresh: drop the checkpoints of an earlier demo there (its DEMO_MARK says
    so), unless a process holds it. A run of `aiayn train`, even on the demo's recipe, is refused, untouched;
    the directory is marked as the demo's before its training starts, so a demo stopped halfway is cleared too."""
    from aiayn.data.tokenizer import TOKENIZER_DIR
    from aiayn.io import exclusive_lock
    from aiayn.training.checkpoint import CHECKPOINT_DIR
    from aiayn.training.config import CONFIG_NAME
    from aiayn.training.metrics import METRICS_FILE
    from aiayn.training.pipeline import LOCK_FILE

    config, mark = out_dir / CONFIG_NAME, out_dir / DEMO_MARK
    if config.is_file() and not mark.is_file():
        raise ValueError(f"{out_dir} holds a run of `aiayn train` ({config}), not an earlier demo's; the demo trains "
                         "afresh into a directory of its own: give another --output")
    out_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out_dir / LOCK_FILE, f"run directory {out_dir}"):
        for name in (CHECKPOINT_DIR, TOKENIZER_DIR, METRICS_FILE):
            path = out_dir / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        mark.touch()


def add_arguments(p) -> None:
    p.add_argument("--task", choices=["copy", "reverse", "sort"], help="synthetic task (default: the recipe's)")
    p.add_argument("--updates", type=int, help="optimizer updates (default: the recipe's)")
    p.add_argument("--seed", type=int, help="seed (default: the recipe's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help=f"override a field of {RECIPE.name} (repeatable)")
    p.add_argument("--output", default="runs/demo", help="run directory; the model is written to OUTPUT/model")


def run(args) -> int:
    from aiayn.commands.train import progress_bar
    from aiayn.plots import draw, save_png
    from aiayn.tasks import load_pipeline
    from aiayn.training.config import string_override

    flags = {"data.task": args.task, "train.max_updates": args.updates, "train.seed": args.seed}
    overrides = [string_override(k, v) if isinstance(v, str) else f"{k}={v}" for k, v in flags.items() if v is not None]
    overrides += args.overrides
    cfg = demo_config(args.output, overrides)
    with progress_bar(cfg) as bar:
        result = run_demo(args.output, overrides, progress=bar)
    for src, ref, hyp in result.examples[:3]:
        print(f"  {src}  ->  {hyp}   ({'ok' if hyp == ref else 'expected ' + ref})")
    print(f"task: {cfg.data.task}   exact match: {result.accuracy:.1%} on {len(result.examples)} held-out examples")
    print(f"model: {result.model_dir}   time: {result.seconds:.1f} s")
    longest = max((src for src, _, _ in result.examples), key=len)
    figure, _ = draw(load_pipeline(result.model_dir).attention(longest))
    plot = save_png(figure, Path(args.output) / "attention.png")
    print(f"cross-attention of '{longest}': {plot}")
    return 0
