"""`aiayn plot` refuses, with a one-line error and no picture, values that would exhaust memory or time
(found by fuzzing: 100000x100000 pixels, a 100,000-position mask, d_k up to 10^20), values that are
not numbers (NaN), and inputs of the wrong kind for the model (--image for a translation model)."""

import json
import math

import pytest
import torch

from aiayn.cli import main
from aiayn.commands.plot import _scaling_dims
from aiayn.plots import plot_masks, plot_positional, plot_schedule, scaling_experiment
from aiayn.plots._figure import new_figure, parse_size


def _refused(capsys, tmp_path, *argv) -> str:
    """Runs `aiayn plot *argv -o OUT`, checks exit status 2 and no picture; returns the error line."""
    out = tmp_path / "refused.png"
    assert main(["plot", *argv, "-o", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aiayn plot: error: ")
    return err[0]


@pytest.mark.parametrize("text", ["100000x100000", "10001x50", "50x10001", "6000x6000"])
def test_a_picture_too_big_is_refused_before_drawing(text):
    with pytest.raises(ValueError, match=rf"size must be from 50x50 to 10000x10000 .*got {text}"):
        parse_size(text)
    with pytest.raises(ValueError, match="size must be"):
        new_figure(tuple(int(v) for v in text.split("x")))


def test_the_size_bound_holds_on_the_command_line(tmp_path, capsys):
    assert "got 20000x60" in _refused(capsys, tmp_path, "mask", "--size", "20000x60")
    assert parse_size("10000x2500") == (10000, 2500)  # the largest still allowed


@pytest.mark.parametrize("kwargs, message", [
    ({"tgt_len": 257}, "tgt_len must be a whole number from 1 to 256, got 257"),
    ({"lengths": [3, 257]}, "lengths must be at most 256 sentences of at most 256 tokens"),
    ({"lengths": [1] * 257}, "got 257 sentences"),
])
def test_masks_are_bounded_to_a_few_hundred_positions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_masks(**kwargs, size=(200, 100))


def test_the_mask_bound_holds_on_the_command_line(tmp_path, capsys):
    assert "tgt_len" in _refused(capsys, tmp_path, "mask", "--tgt-len", "300")
    assert "lengths" in _refused(capsys, tmp_path, "mask", "--lengths", "300")


@pytest.mark.parametrize("kwargs, message", [
    ({"length": 4097}, "length must be a whole number from 1 to 4096, got 4097"),
    ({"d_model": 4097, "dims": [0]}, "d_model must be a whole number from 1 to 4096, got 4097"),
    ({"dims": []}, "dims must name at least one dimension"),
])
def test_positional_sizes_are_bounded_and_dims_not_empty(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_positional(**kwargs, size=(200, 100))


def test_empty_dims_is_a_clear_error(tmp_path, capsys):
    """It was matplotlib's "number sections must be larger than 0." after a legend warning."""
    assert "dims must name at least one dimension" in _refused(capsys, tmp_path, "positional", "--dims", "")


@pytest.mark.parametrize("max_dk", [0, 2**16 + 1, 10**20])
def test_max_dk_is_bounded(max_dk):
    with pytest.raises(ValueError, match=rf"--max-dk must be from 1 to 65536, got {max_dk}"):
        _scaling_dims(max_dk)


def test_max_dk_bound_in_the_experiment_and_at_the_bound():
    assert _scaling_dims(2**16)["dims"][-1] == 2**16
    with pytest.raises(ValueError, match="d_k must be a whole number from 1 to 65536, got 131072"):
        scaling_experiment(dims=[1, 2**17], n_queries=2, n_keys=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"factor": math.nan}, "factor must be a finite number > 0, got nan"),
    ({"factor": math.inf}, "factor must be a finite number > 0, got inf"),
    ({"factor": 0.0}, "factor must be a finite number > 0, got 0.0"),
    ({"warmup": 0}, "warmup must be a whole number from 1"),
    ({"warmup": math.nan}, "warmup must be a whole number from 1"),
    ({"d_model": 10**400}, "d_model must be a whole number from 1 to 1048576"),
    ({"total_steps": 10**20}, "steps must be a whole number from 1 to 1000000000000, got 100000000000000000000"),
])
def test_schedule_values_must_be_finite_and_positive(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_schedule(**kwargs, compare=False, size=(200, 100))


def test_nan_factor_is_refused_on_the_command_line(tmp_path, capsys):
    assert "factor must be a finite number > 0, got nan" in _refused(capsys, tmp_path, "schedule", "--factor", "nan")


def test_negative_max_len_b_is_refused_as_translate_refuses_it(tmp_path, capsys, model_dir):
    error = _refused(capsys, tmp_path, "attention", "--model", str(model_dir), "--sentence", "a b c",
                     "--max-len-b", "-1")
    (tmp_path / "in.txt").write_text("a b c\n")
    assert main(["translate", "--model", str(model_dir), "-i", str(tmp_path / "in.txt"), "--max-len-b", "-1"]) == 2
    translate_error = capsys.readouterr().err.strip()
    assert error.split("error: ")[1] == translate_error.split("error: ")[1] == "max_len_b must be >= 0, got -1"


def test_image_is_refused_for_a_text_model(tmp_path, capsys, model_dir):
    """It translated the text "3" and drew that."""
    error = _refused(capsys, tmp_path, "attention", "--model", str(model_dir), "--image", "3")
    assert "--image 3" in error and "reads text" in error


def test_sentence_is_refused_for_an_image_model(tmp_path, capsys):
    """It read the sentence "5" as the number of a test image and drew that image."""
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the vision extra)")
    from aiayn.models import EncoderOnly, EncoderOnlyConfig

    torch.manual_seed(0)
    EncoderOnly(EncoderOnlyConfig(vocab_size=1, d_model=16, n_heads=2, n_layers=1, d_ff=32, input="patches",
                                  patch_dim=4, n_classes=10, max_positions=17)).save_pretrained(tmp_path / "vit")
    (tmp_path / "vit" / "task.json").write_text(json.dumps({"task": "image-classify", "labels": list("0123456789"),
                                                             "patch_size": 2}))
    error = _refused(capsys, tmp_path, "attention", "--model", str(tmp_path / "vit"), "--sentence", "5")
    assert "--sentence '5'" in error and "reads images" in error
