import tomllib

import pytest

from aiayn.config import ConfigError, OptimConfig
from aiayn.training.config import RunConfig, TrainConfig, load_config, save_config, to_toml

GOOD = """
[model]
preset = "tiny"
dropout = 0.2

[optim]
warmup_steps = 100

[data]
vocab_type = "symbols"

[train]
max_updates = 10
precision = "bf16"
"""


def write(tmp_path, text, name="c.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_and_defaults_come_from_the_dataclasses(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.optim.warmup_steps == 100
    assert cfg.optim.label_smoothing == OptimConfig().label_smoothing  # paper default, not restated
    model = cfg.model.build(20, 20)
    assert (model.d_model, model.dropout, model.src_vocab_size, model.share_embeddings) == (32, 0.2, 20, True)
    assert cfg.train.precision == "bf16"


def test_overrides(tmp_path):
    cfg = load_config(write(tmp_path, GOOD), ["train.max_updates=3", "model.d_ff=48", "optim.betas=[0.9, 0.99]",
                                              "train.run_dir=runs/x"])
    assert cfg.train.max_updates == 3 and cfg.model.build(20, 20).d_ff == 48
    assert cfg.optim.betas == (0.9, 0.99) and cfg.train.run_dir == "runs/x"


def test_saved_config_reads_back_identical(tmp_path):
    cfg = load_config(write(tmp_path, GOOD), ["train.max_minutes=1.5"])
    path = save_config(cfg, tmp_path / "run")
    assert load_config(path) == cfg
    assert TrainConfig.from_dict(tomllib.loads(to_toml(cfg))) == cfg


def test_strings_with_control_characters_are_saved_as_valid_toml(tmp_path):
    """A run's saved config.toml is what --resume reads: a newline, a control character, DEL, a
    quote or a backslash in a string must come back as they went in."""
    odd = r'in\nput\t\u0001\u007f\"\\é'  # TOML escapes, as --set reads them
    cfg = load_config(write(tmp_path, GOOD), [f'data.src_lang="{odd}"'])
    assert cfg.data.src_lang == 'in\nput\t\x01\x7f"\\é'
    assert load_config(save_config(cfg, tmp_path / "run")) == cfg


def test_a_config_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(ValueError, match=rf"c\.toml:{GOOD.count(chr(10)) + 1}: invalid UTF-8"):
        load_config(path)


@pytest.mark.parametrize("text, overrides, message", [
    (GOOD + "bogus = 1\n", [], r"c.toml: unknown key\(s\) train.bogus; known in \[train\]"),  # no close name
    (GOOD + "max_update = 1\n", [], r"unknown key\(s\) train.max_update \(did you mean train.max_updates\?\)"),
    (GOOD.replace("[data]", "[datta]"), [], r"unknown section\(s\) datta \(did you mean data\?\)"),
    (GOOD, ["model.heads=4"], r"unknown model key\(s\): heads \(did you mean n_heads\?\)"),
    (GOOD, ["model.src_vocab_size=4"], "set from the tokenizer"),
    (GOOD, ["model.preset=huge"], "unknown preset 'huge'"),
    (GOOD, ['model.type="encoder-only"'], "model.preset = 'tiny': model type 'encoder-only' has no presets"),
    (GOOD, ["train.precision=fp8"], "train.precision must be one of fp32, bf16, fp16"),
    (GOOD, ["train.max_updates=0"], "set at least one of train.max_updates"),
    (GOOD, ["train.update_freq=0"], "train.update_freq must be >= 1"),
    (GOOD, ["train.cooldown=1.0"], r"train.cooldown must be in \[0, 1\)"),
    (GOOD, ["train.seed=-1"], r"train.seed must be from 0 to 2\*\*32 - 1"),
    (GOOD, [f"train.seed={2**32}"], r"train.seed must be from 0 to 2\*\*32 - 1"),
    (GOOD, ["train.schedule=cosine"], "train.schedule must be one of noam"),
    (GOOD, ["optim.label_smoothing=1.5"], r"label_smoothing must be in \[0, 1\)"),
    (GOOD, ["data.vocab_type=wordpiece"], "data.vocab_type must be one of"),
    (GOOD, ["train.max_updates=ten"], "train.max_updates must be an integer, got 'ten'"),
    (GOOD, ["train.keep_last=2", "train.average_last=5"], "average_last .5. cannot exceed"),
    (GOOD, ["train.keep_last=5", "train.average_last=3", 'train.final="best"'], "average_last does not apply"),
    (GOOD, ["max_updates=3"], "--set expects section.key=value"),
    ("[train\nmax_updates = 1", [], "c.toml: invalid TOML"),
])
def test_bad_configs_give_clear_errors(tmp_path, text, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), overrides)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        load_config(tmp_path / "nope.toml")


def test_a_directory_given_as_config_says_what_to_give_and_a_byte_order_mark_is_read(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    with pytest.raises(ConfigError, match=f"{run}: is a directory, not a config file .*--resume {run}"):
        load_config(run)
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # as a Windows editor saves it
    assert load_config(bom) == load_config(write(tmp_path, GOOD))


def test_run_config_needs_a_budget():
    with pytest.raises(ConfigError, match="at least one of"):
        RunConfig()


def test_task_is_a_top_level_key(tmp_path):
    from aiayn.training.config import load_config, to_toml

    path = tmp_path / "r.toml"
    path.write_text('task = "translation"\n[train]\nmax_updates = 3\n')
    cfg = load_config(path)
    assert cfg.task == "translation" and to_toml(cfg).startswith('task = "translation"')
    path.write_text('task = "poetry"\n[train]\nmax_updates = 3\n')
    with pytest.raises(ConfigError, match=r"r\.toml: unknown task 'poetry'; built in: translation, summarization, qa, "):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown task .poetry."):
        load_config(None, ["train.max_updates=1", "task=poetry"])


def test_keys_renamed_by_the_per_task_settings_still_load_with_a_warning(caplog):
    """A recipe or a run's config.toml from before the per-task [data] sections loads (and resumes)."""
    import logging

    cases = [('task="summarization"', "data.max_source_length=64", "max_input_tokens", 64),
             ('task="qa"', "data.valid_fraction=0.1", "carve_fraction", 0.1),
             ('task="classify"', "data.max_length=32", "max_input_tokens", 32)]
    for task, old, new, value in cases:
        with caplog.at_level(logging.WARNING):
            cfg = load_config(None, ["train.max_updates=1", task, old])
        assert getattr(cfg.data, new) == value
        assert f"{old.split('=')[0]} is now data.{new}" in caplog.text
    cfg = load_config(None, ["train.max_updates=1", 'task="lm"', 'data.format="text"'])
    assert "data.format no longer applies" in caplog.text and "format" not in cfg.to_dict()["data"]
    with pytest.raises(ConfigError, match="data.max_source_length was renamed data.max_input_tokens; give only"):
        load_config(None, ["train.max_updates=1", "data.max_source_length=5", "data.max_input_tokens=5"])


def test_precision_auto_is_bf16_exactly_where_the_device_multiplies_bf16_natively(monkeypatch):
    from aiayn import runtime

    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert runtime.native_bf16("cpu") and runtime.resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    assert runtime.resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert not runtime.native_bf16("cpu") and runtime.resolve_precision("auto", "cpu") == "fp32"
    assert runtime.resolve_precision("fp16", "cpu") == "fp16"  # others pass through
    assert RunConfig(precision="auto", max_updates=1).precision == "auto"


def test_a_model_type_without_presets_saves_none():
    from aiayn.training.config import ModelSpec

    assert "preset" not in ModelSpec(type="rnn").to_dict()  # its run's config.toml says nothing it ignores
    assert ModelSpec(preset="small").to_dict()["preset"] == "small"


@pytest.mark.parametrize("directory", ["3", "true", "inf", "2024-01-01", '"a"', 'runs/a "b" \\ c', "runs/é"])
def test_a_path_flag_is_taken_as_given(directory):
    """--run-dir, --resume and the demo's --output are strings, not TOML values: "3" was an integer,
    "2024-01-01" a date, and '"a"' lost its quotes."""
    from aiayn.training.config import string_override

    assert load_config(None, ["train.max_updates=1", string_override("train.run_dir", directory)]).train.run_dir == directory


def test_a_best_metric_validation_cannot_give_is_refused_when_loaded():
    """A typo was found at the first validation, validate_every updates in."""
    with pytest.raises(ConfigError, match=r"train.best_metric = 'blue': task 'translation' validates nll, loss, ppl, "
                                          r"bleu \(did you mean train.best_metric = bleu\?\)"):
        load_config(None, ["train.max_updates=1", "train.best_metric=blue"])


def test_a_decoded_best_metric_without_decoding_at_validation_is_refused_when_loaded():
    """train.bleu = false turns validation's decoding off: best_metric = "bleu" was refused at the first
    validation, with no checkpoint yet, and the run's updates were lost."""
    with pytest.raises(ConfigError, match=r"train.best_metric = 'bleu' needs train.bleu = true"):
        load_config(None, ["train.max_updates=1", 'train.best_metric="bleu"', "train.bleu=false"])
    assert load_config(None, ["train.max_updates=1", 'train.best_metric="nll"', "train.bleu=false"])
    assert load_config(None, ['task="classify"', "train.max_updates=1", 'train.best_metric="accuracy"', "train.bleu=false"])


@pytest.mark.parametrize("task", ["translation", "summarization", "qa"])
def test_each_text_task_declares_the_metrics_it_validates(task):
    """`metrics` (what train.best_metric may name) holds every name `scores` gives: bAbI's groups too."""
    from aiayn.tasks import build_task
    from aiayn.tasks.seq2seq import Examples

    built = build_task(load_config(None, [f'task="{task}"', "train.max_updates=1"]))
    given = built.scores(["a b", "c"], Examples(["x", "y"], [["a b"], ["d"]], groups=[1, 2]))
    assert given and set(given) <= set(built.metrics)
    assert all(load_config(None, [f'task="{task}"', "train.max_updates=1", f'train.best_metric="{m}"']) for m in given)
