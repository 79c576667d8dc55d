import dataclasses
import math

import pytest

from aiayn.config import (ConfigError, DecodeConfig, OptimConfig, SamplingConfig, TransformerConfig,
                          training_only_names)
from aiayn.models import MODEL_TYPES


def test_base_defaults_are_the_paper():
    c = TransformerConfig()
    assert (c.d_model, c.n_heads, c.d_ff, c.n_encoder_layers, c.n_decoder_layers, c.dropout) == (512, 8, 2048, 6, 6, 0.1)
    assert not c.norm_first and c.positional == "sinusoidal" and c.tie_output
    o, d = OptimConfig(), DecodeConfig()
    assert (o.label_smoothing, o.betas, o.eps, o.warmup_steps) == (0.1, (0.9, 0.98), 1e-9, 4000)
    assert (d.beam_size, d.length_penalty, d.max_len_a, d.max_len_b) == (4, 0.6, 1.0, 50)


def test_presets():
    big = TransformerConfig.preset("big")
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)
    small = TransformerConfig.preset("small", src_vocab_size=100)
    assert (small.d_model, small.n_heads, small.n_encoder_layers, small.d_ff, small.src_vocab_size) == (256, 4, 3, 1024, 100)
    with pytest.raises(ConfigError, match="unknown preset"):
        TransformerConfig.preset("huge")


def test_embedding_sharing_follows_joint_vocabulary():
    assert TransformerConfig(src_vocab_size=100).share_embeddings
    assert not TransformerConfig(src_vocab_size=100, tgt_vocab_size=90).share_embeddings
    with pytest.raises(ConfigError, match="joint vocabulary"):
        TransformerConfig(src_vocab_size=100, tgt_vocab_size=90, share_embeddings=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"d_model": 510}, "divisible by n_heads"),
    ({"dropout": -0.1}, "dropout must be in"),
    ({"attention_dropout": 1.0}, "attention_dropout"),
    ({"n_encoder_layers": 0}, "n_encoder_layers"),
    ({"positional": "rotary"}, "positional"),
    ({"src_vocab_size": 2}, "special ids"),
])
def test_bad_values_are_clear_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig(**kwargs)


def test_other_configs_validate():
    with pytest.raises(ConfigError, match="label_smoothing"):
        OptimConfig(label_smoothing=1.5)
    with pytest.raises(ConfigError, match="nbest"):
        DecodeConfig(beam_size=2, nbest=3)


@pytest.mark.parametrize("field", ["temperature", "top_p"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_sampling_values_must_be_finite(field, value):
    """`generate --temperature inf` used to reach torch (logits / inf is NaN after top-k's -inf)."""
    with pytest.raises(ConfigError, match=f"^{field} must be a finite number"):
        SamplingConfig(**{field: value})
    assert SamplingConfig(temperature=1e-3, top_p=1e-3)  # small finite values stay valid


def test_round_trip_and_unknown_keys():
    c = TransformerConfig.preset("tiny", src_vocab_size=50)
    assert TransformerConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="d_modle"):
        TransformerConfig.from_dict({**c.to_dict(), "d_modle": 3})


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_every_dropout_and_the_ponder_cost_are_training_only(model_type):
    """`aiayn average` mixes checkpoints that differ only in training-only fields, so a new dropout
    field left undeclared would make averaging refuse, and a declared shape field would make it wrong."""
    config_class = MODEL_TYPES[model_type].config_class
    names = {f.name for f in dataclasses.fields(config_class)}
    assert training_only_names(config_class) == {n for n in names if n.endswith("dropout") or n == "ponder_cost"}


@pytest.mark.parametrize("seed", [2**64, -2**63 - 1])
def test_a_sampling_seed_must_be_one_torch_takes(seed):
    with pytest.raises(ConfigError, match="^seed must be from"):
        SamplingConfig(seed=seed)
    assert SamplingConfig(seed=2**64 - 1).seed == 2**64 - 1 and SamplingConfig(seed=-2**63).seed == -2**63


@pytest.mark.parametrize("field", ["lr_factor", "eps", "weight_decay"])
def test_optimiser_numbers_must_be_finite(field):
    """lr_factor = inf trained a first update at an infinite learning rate: every weight NaN."""
    with pytest.raises(ConfigError, match=f"^{field} must be a finite number"):
        OptimConfig(**{field: float("inf")})


@pytest.mark.parametrize("task, vocab_type, ok", [
    ("translation", "chars", False), ("summarization", "chars", False), ("classify", "chars", False),
    ("lm", "symbols", False), ("lm", "chars", True), ("translation", "symbols", True), ("qa", "unigram", True),
])
def test_each_task_takes_the_vocabularies_its_builder_makes(task, vocab_type, ok):
    """Refused when the config is read (naming data.vocab_type), not when the vocabulary is built."""
    from aiayn.training.config import load_config

    overrides = [f'task="{task}"', f'data.vocab_type="{vocab_type}"', "train.max_updates=1"]
    if ok:
        assert load_config(None, overrides).data.vocab_type == vocab_type
    else:
        with pytest.raises(ConfigError, match=f"data.vocab_type must be one of .* for this task, got '{vocab_type}'"):
            load_config(None, overrides)


def test_a_language_model_holds_out_some_text():
    from aiayn.training.config import load_config

    with pytest.raises(ConfigError, match="data.valid_fraction must be above 0"):
        load_config(None, ['task="lm"', "data.valid_fraction=0.0", "train.max_updates=1"])


@pytest.mark.parametrize("cls, kwargs, message", [
    (DecodeConfig, {"max_len_a": math.inf}, "max_len_a must be a finite number"),  # cast to a length, it became 1
    (DecodeConfig, {"length_penalty": math.inf}, "length_penalty must be a finite number"),
    (TransformerConfig, {"layer_norm_eps": math.inf}, "layer_norm_eps must be a finite number"),
    (TransformerConfig, {"ponder_cost": math.inf}, "ponder_cost must be a finite number"),
    (DecodeConfig, {"beam_size": True}, "beam_size must be an integer, got True"),
    (DecodeConfig, {"beam_size": 2.5}, "beam_size must be an integer, got 2.5"),
    (SamplingConfig, {"top_k": 1.5}, "top_k must be an integer"),
    (OptimConfig, {"warmup_steps": True}, "warmup_steps must be an integer"),
    (TransformerConfig, {"norm_first": "false"}, "norm_first must be true or false"),  # a truthy string: pre-norm
    (TransformerConfig, {"d_model": 512.0}, "d_model must be an integer"),
])
def test_values_a_recipe_could_not_hold_are_refused_from_python_too(cls, kwargs, message):
    """The type and range checks of a recipe hold for a config built in Python or from a hand-edited
    config.json, not only at the TOML boundary."""
    with pytest.raises(ConfigError, match=message):
        cls(**kwargs)
