"""`aiayn train`: train a model from a TOML config (see recipes/), or resume a run."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

HELP = "train a model from a TOML config (recipes/*.toml), or resume a run"


def add_arguments(p) -> None:
    p.add_argument("config", nargs="?", help="training config (TOML); omit with --resume")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its last checkpoint, with the "
                                                       "config saved there (plus any --set)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config field, e.g. --set train.max_updates=100 (repeatable)")
    p.add_argument("--run-dir", help="shorthand for --set train.run_dir=DIR")


@contextlib.contextmanager
def progress_bar(cfg):
    """A tqdm bar fed by the trainer's `progress` callback (None when `train.progress` is off
    or on ranks other than 0)."""
    if not (cfg.train.progress and _is_main()):
        yield None
        return
    from tqdm.auto import tqdm

    bars = []  # made at the first report, after the data preparation has logged its lines

    def update(p) -> None:
        if not bars:
            bars.append(tqdm(total=p.total, initial=p.step, unit="upd", dynamic_ncols=True, desc="train",
                             file=sys.stderr))
        bar = bars[0]
        if bar.n != p.step:
            bar.update(p.step - bar.n)
        if p.postfix:
            bar.set_postfix(p.postfix, refresh=False)

    try:
        yield update
    finally:
        for bar in bars:
            bar.close()


def run(args) -> int:
    import time

    from aiayn.runtime import bound_onednn_caches, flush_denormals, keep_freed_memory

    keep_freed_memory()  # before the first large tensor: see its docstring
    bound_onednn_caches()  # before the first bf16 matmul: see its docstring
    flush_denormals()  # before torch's first parallel op: see its docstring
    from aiayn.training.config import load_config, string_override
    from aiayn.training.pipeline import evaluate_test, resume_config, train
    from aiayn.training.trainer import TrainingDiverged

    overrides = list(args.overrides) + ([string_override("train.run_dir", args.run_dir)] if args.run_dir else [])
    if args.resume:
        if args.config:
            raise ValueError("give either CONFIG or --resume RUN_DIR, not both")
        cfg = resume_config(args.resume, overrides)
        if Path(cfg.train.run_dir).resolve() != Path(args.resume).resolve():
            raise ValueError(f"--resume {args.resume} names the run; --run-dir (or --set train.run_dir) "
                             f"{cfg.train.run_dir} points elsewhere")
    elif args.config:
        cfg = load_config(args.config, overrides)
    else:
        raise ValueError("a CONFIG.toml (or --resume RUN_DIR) is required")
    start = time.monotonic()
    try:
        with progress_bar(cfg) as bar:
            result = train(cfg, resume=bool(args.resume), progress=bar)
    except TrainingDiverged as e:
        print(f"aiayn train: {e}")
        return 3
    s = result.state
    if not _is_main():
        return 130 if result.stop_reason == "signal" else 0  # rank 0 prints the summary
    if result.stop_reason == "already_finished":
        print(f"{cfg.train.run_dir} already finished its budget at update {s.step}: nothing to do, nothing changed "
              f"(raise it with --set train.max_updates=N, train.max_epochs or train.max_minutes)")
        return 0
    print(f"stopped ({result.stop_reason}) after {s.step} updates, {s.epoch} epochs, "
          f"{s.elapsed / 60:.1f} min of training ({(time.monotonic() - start) / 60:.1f} min in this process)")
    if result.last_valid:
        v = result.last_valid
        print("last validation: " + ", ".join(f"{k} {v[k]:.3f}" for k in ("loss", "nll", "ppl", "bleu") if k in v))
    print(f"model: {cfg.train.run_dir}/model   (resume: aiayn train --resume {cfg.train.run_dir})")
    if result.stop_reason == "signal":
        return 130
    _test(cfg, evaluate_test)
    return 0


def _test(cfg, evaluate_test) -> None:
    from tqdm.auto import tqdm

    # delay: no bar for a test over within a second, or one that reports no progress (a language model's)
    with tqdm(unit="sent", desc="test", file=sys.stderr, disable=not cfg.train.progress, delay=1.0) as bar:
        def update(n: int, total: Optional[int] = None) -> None:  # a task that knows its size gives it: an estimate
            if total is not None and bar.total != total:
                bar.total = total
            bar.update(n)

        test = evaluate_test(cfg, progress=update)
    if test is not None:
        scores = test.get("detail") or json.dumps({k: v for k, v in test.items() if k not in _TEST_META})
        search = f" (beam {test['beam_size']}, alpha {test['length_penalty']})" if test.get("beam_size") else ""
        print(f"test {test['split']}{search}: {scores}\n"
              f"  signature: {test['signature']}\n  evaluation time: {test['seconds'] / 60:.1f} min\n"
              f"  all scores: {Path(cfg.train.run_dir) / 'test_scores.json'}")


_TEST_META = frozenset({"split", "beam_size", "length_penalty", "n_sentences", "n_examples", "seconds", "signature",
                        "detail", "dropped_elsewhere"})


def _is_main() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"
