"""Learning checks: the demo's tiny Transformer must solve its synthetic tasks."""

import pytest

from aiayn.commands.demo import run_demo


@pytest.mark.slow  # a learning check of more than a few seconds
def test_tiny_model_learns_copy_to_100_percent(tmp_path):
    # The `tiny` preset (d_model 32, 2 heads, 2+2 layers) without dropout, on the demo recipe
    # otherwise: 100% on seeds 1-3 (with the recipe's cooldown; without it seeds 1 and 3 stop at 97-98%).
    overrides = ['data.task="copy"', "model.d_model=32", "model.d_ff=64", "model.n_heads=2", "model.dropout=0.0",
                 "train.max_updates=1000", "data.max_tokens=2944", "train.progress=false"]  # 2944 = 128 · 23
    result = run_demo(tmp_path, overrides, n_test=300)
    wrong = [(s, h) for s, t, h in result.examples if h != t]
    assert result.accuracy == 1.0, f"{len(wrong)} wrong, e.g. {wrong[:3]}"
    assert (result.model_dir / "config.json").is_file() and (result.model_dir / "tokenizer.json").is_file()


def test_the_demo_trains_into_output_and_refuses_another_run_dir(tmp_path):
    from aiayn.commands.demo import demo_config

    assert demo_config(tmp_path / "out").train.run_dir == str(tmp_path / "out")
    with pytest.raises(ValueError, match="--set train.run_dir: the demo trains into --output"):
        demo_config(tmp_path / "out", [f"train.run_dir={tmp_path / 'elsewhere'}"])


def test_the_demo_never_clears_another_runs_directory_or_a_locked_one(tmp_path):
    """It clears an earlier demo's checkpoints to start afresh: not those of a run of `aiayn train`, on real
    data or on the demo's own recipe, and not while a process holds the directory (they were gone before
    the lock was asked for)."""
    from aiayn.commands.demo import DEMO_MARK, _clear_previous_run, demo_config
    from aiayn.io import LockedError, exclusive_lock
    from aiayn.training.config import load_config, save_config

    real, trained, demo = tmp_path / "real", tmp_path / "trained", tmp_path / "demo"
    save_config(load_config(None, ["train.max_updates=1", f'data.corpus="{tmp_path}"']), real)
    save_config(demo_config(trained), trained)  # `aiayn train recipes/demo.toml`: synthetic, but not a demo's
    save_config(demo_config(demo), demo)
    (demo / DEMO_MARK).touch()
    for run in (real, trained, demo):
        (run / "checkpoints" / "ckpt_00000001").mkdir(parents=True)
    for run in (real, trained):
        with pytest.raises(ValueError, match=f"{run} holds a run of `aiayn train`"):
            run_demo(run)
    with exclusive_lock(demo / ".lock", "another run"), pytest.raises(LockedError, match="in use by another process"):
        run_demo(demo)
    assert all((run / "checkpoints" / "ckpt_00000001").is_dir() for run in (real, trained, demo))
    _clear_previous_run(demo)  # a demo's, not held: cleared, and still marked as the demo's
    assert not (demo / "checkpoints").exists() and (demo / DEMO_MARK).is_file()
    fresh = tmp_path / "fresh"
    _clear_previous_run(fresh)  # a new directory is marked before the training starts
    assert (fresh / DEMO_MARK).is_file()
