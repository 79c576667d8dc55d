"""The shipped recipes load, and recipes/demo.toml is the config `aiayn demo` trains with."""

import dataclasses
from pathlib import Path

import pytest

from aiayn.config import OptimConfig
from aiayn.demo import DemoConfig, train_config
from aiayn.training.config import load_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("name", ["demo", "multi30k-de-en", "wmt14-en-de-base", "wmt14-en-de-big"])
def test_recipe_loads(name):
    cfg = load_config(RECIPES / f"{name}.toml")
    assert cfg.optim.label_smoothing == OptimConfig().label_smoothing
    assert cfg.model.build(8000, 8000).tie_output


def test_demo_recipe_matches_the_demo_code():
    recipe = load_config(RECIPES / "demo.toml")
    code = train_config(DemoConfig(), recipe.train.run_dir)
    assert dataclasses.replace(code.train, progress=recipe.train.progress) == recipe.train
    assert (code.model, code.optim, code.data) == (recipe.model, recipe.optim, recipe.data)


def test_paper_recipes():
    base, big = (load_config(RECIPES / f"wmt14-en-de-{n}.toml") for n in ("base", "big"))
    assert (base.train.max_updates, base.train.average_last) == (100_000, 5)
    assert (big.train.max_updates, big.train.average_last) == (300_000, 20)
    for cfg in (base, big):  # ≈ 25k source + 25k target tokens per update on one device
        assert cfg.data.max_tokens * cfg.train.update_freq == 50_000
        assert (cfg.decode.beam_size, cfg.decode.length_penalty) == (4, 0.6)
    assert big.model.build(37000, 37000).dropout == 0.3
