"""The shipped recipes load, and recipes/demo.toml is the config `aiayn demo` trains with."""

import dataclasses
from pathlib import Path

import pytest
import torch

from aiayn.commands.demo import RECIPE, demo_config
from aiayn.config import OptimConfig
from aiayn.training.config import load_config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("name", ["demo", "multi30k-de-en", "wmt14-en-de-base", "wmt14-en-de-big"])
def test_paper_like_recipe_keeps_the_paper_defaults(name):
    cfg = load_config(RECIPES / f"{name}.toml")
    assert cfg.optim.label_smoothing == OptimConfig().label_smoothing
    assert cfg.model.build(8000, 8000).tie_output


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_loads_and_builds_its_model(path):
    """Each recipe's sections check against its task's settings, and its [model] makes a model."""
    from aiayn.models import build_model

    cfg = load_config(path)
    config = cfg.model.build(64, 64)
    if getattr(config, "source_units", "tokens") == "sentences":  # the qa task sets these from its vocabulary
        config = dataclasses.replace(config, sentence_ends=(5,))
    with torch.device("meta"):  # shapes only
        model = build_model(cfg.model.type, config)
    assert model.num_parameters() > 0 and cfg.train.run_dir


def test_demo_trains_the_shipped_recipe_with_its_flags_on_top():
    assert RECIPE.resolve() == (RECIPES / "demo.toml").resolve()  # recipes/ is the package's own folder
    recipe = load_config(RECIPES / "demo.toml")
    cfg = demo_config("out", ['data.task="copy"', "train.max_updates=7"])
    assert (cfg.data.task, cfg.train.max_updates, cfg.train.run_dir) == ("copy", 7, "out")
    assert (cfg.model, cfg.optim) == (recipe.model, recipe.optim)
    assert cfg.data.n_train == recipe.data.n_train and cfg.train.cooldown == recipe.train.cooldown


def test_paper_recipes():
    base, big = (load_config(RECIPES / f"wmt14-en-de-{n}.toml") for n in ("base", "big"))
    assert (base.train.max_updates, base.train.average_last) == (100_000, 5)
    assert (big.train.max_updates, big.train.average_last) == (300_000, 20)
    for cfg in (base, big):  # ≈ 25k source + 25k target tokens per update on one device
        assert cfg.data.max_tokens * cfg.train.update_freq == 50_000
        assert (cfg.decode.beam_size, cfg.decode.length_penalty) == (4, 0.6)
    assert big.model.build(37000, 37000).dropout == 0.3


def test_rnn_recipe_is_the_transformer_recipe_but_for_the_model():
    rnn, transformer = (load_config(RECIPES / f"multi30k-de-en{n}.toml") for n in ("-rnn", ""))
    assert rnn.model.type == "rnn" and rnn.model.build(8000, 8000).score == "additive"
    assert (rnn.data, rnn.decode) == (transformer.data, transformer.decode)
    assert rnn.train.max_minutes == transformer.train.max_minutes


def test_universal_babi_recipe_is_the_babi_recipe_but_for_the_model():
    universal, plain = (load_config(RECIPES / f"babi-qa{n}.toml") for n in ("-universal", ""))
    config = universal.model.build(200, 200)
    assert config.universal and config.act and (config.steps(config.n_encoder_layers), config.steps(config.n_decoder_layers)) == (6, 2)
    assert (universal.data, universal.decode, universal.optim) == (plain.data, plain.decode, plain.optim)
    assert universal.train.max_minutes == plain.train.max_minutes


def test_copy_translation_recipe_is_the_multi30k_recipe_but_for_its_named_settings():
    """Copy attention plus what issue 32 chose on val (4+4 layers, wider FFN, dropout, label smoothing, weight
    decay, bf16 where native, the length penalty in fairseq's form)."""
    import dataclasses

    copy, plain = (load_config(RECIPES / f"multi30k-de-en{n}.toml") for n in ("-copy", ""))
    with_copy, without = copy.model.build(8000, 8000), plain.model.build(8000, 8000)
    assert with_copy.copy_attention and not without.copy_attention
    assert (with_copy.n_encoder_layers, with_copy.n_decoder_layers, with_copy.d_ff, with_copy.dropout) == (4, 4, 2048, 0.15)
    assert (copy.optim.label_smoothing, copy.optim.weight_decay, copy.train.precision) == (0.2, 0.05, "auto")
    assert dataclasses.replace(with_copy, copy_attention=False, d_ff=without.d_ff, dropout=without.dropout,
                               n_encoder_layers=without.n_encoder_layers, n_decoder_layers=without.n_decoder_layers) == without
    assert dataclasses.replace(copy.optim, label_smoothing=plain.optim.label_smoothing,
                               weight_decay=plain.optim.weight_decay) == plain.optim
    assert (copy.decode.length_penalty_form, plain.decode.length_penalty_form) == ("plain", "gnmt")
    assert (copy.data, dataclasses.replace(copy.decode, length_penalty_form=plain.decode.length_penalty_form)) == (plain.data, plain.decode)
    assert dataclasses.replace(copy.train, run_dir=plain.train.run_dir, precision=plain.train.precision) == plain.train
