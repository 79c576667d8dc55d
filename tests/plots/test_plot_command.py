"""Every `aiayn plot KIND` writes a PNG of the requested pixel size that is not blank."""

import json

import numpy as np
import pytest

from aiayn.cli import build_parser, main
from aiayn.commands.plot import _schedule_settings
from aiayn.config import PAD_ID
from aiayn.modules.embeddings import sinusoid_table
from aiayn.plots import plot_masks, plot_positional, plot_schedule
from aiayn.training.schedule import noam_lr
from plot_helpers import assert_picture


@pytest.fixture
def run_dir(tmp_path):
    rows = [{"step": s, "split": "train", "loss": 4 - s / 100, "nll": 3 - s / 100, "ppl": 10.0 - s / 50, "lr": s * 1e-5}
            for s in range(1, 200, 20)]
    rows.append({"step": 200, "split": "valid", "loss": 2.0, "nll": 1.8, "ppl": 6.0, "bleu": 3.5})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 2')
    layers = [{"layer": name, "d": d, "n": n, "ms": n * (n if name == "self-attention" else d) / 1e3}
              for name in ("self-attention", "recurrent (GRU)") for d in (16, 32) for n in (8, 32, 128)]
    (tmp_path / "layers.json").write_text("threads 2\n" + json.dumps({"rows": layers}) + "\n")
    return tmp_path


def _argv(kind, model_dir, run_dir):
    return {
        "attention": ["--model", str(model_dir), "--sentence", "a b c", "--part", "all", "--layer", "1",
                      "--max-len-b", "3"],
        "positional": ["--length", "50", "--d-model", "64"],
        "mask": ["--lengths", "4,2,5", "--tgt-len", "5"],
        "schedule": ["--warmup", "100", "--d-model", "64", "--schedule", "noam", "--schedule", "constant"],
        "curves": [str(run_dir)],
        "scaling": ["--max-dk", "16"],
        "complexity": [str(run_dir / "layers.json")],
    }[kind]


@pytest.mark.parametrize("kind", ["attention", "positional", "mask", "schedule", "curves", "scaling", "complexity"])
def test_each_kind_writes_a_picture(kind, tmp_path, model_dir, run_dir, capsys):
    out = tmp_path / "pictures" / f"{kind}.png"
    assert main(["plot", kind, "--output", str(out), "--size", "640x480", *_argv(kind, model_dir, run_dir)]) == 0
    assert_picture(out, (640, 480))
    assert str(out) in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["attention", "mask"])
def test_a_picture_on_stdout_is_the_picture_alone(kind, tmp_path, model_dir, run_dir, capfdbinary):
    """-o - : the PNG goes to stdout, and the command's own lines (what it wrote, the attention's source
    and output) to stderr, so `aiayn plot ... -o - > a.png` is a whole PNG."""
    capfdbinary.readouterr()
    assert main(["plot", kind, "-o", "-", *_argv(kind, model_dir, run_dir)]) == 0
    out, err = capfdbinary.readouterr()
    assert out.startswith(b"\x89PNG") and out.endswith(b"IEND\xaeB`\x82")
    assert b"wrote -" in err


def test_bad_input_is_a_clean_error(tmp_path, capsys):
    assert main(["plot", "curves", str(tmp_path), "-o", str(tmp_path / "x.png")]) == 2
    assert "metrics" in capsys.readouterr().err
    assert main(["plot", "mask", "--size", "big", "-o", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


def test_positional_arrays_are_the_model_table():
    _, arrays = plot_positional(length=20, d_model=16, dims=[0, 3])
    np.testing.assert_array_equal(arrays["table"], sinusoid_table(20, 16).numpy())
    with pytest.raises(ValueError, match="outside"):
        plot_positional(d_model=16, dims=[16])


def test_masks_by_hand():
    _, arrays = plot_masks(lengths=[3, 1], tgt_len=3)
    np.testing.assert_array_equal(arrays["padding"], [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(arrays["causal"], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    np.testing.assert_array_equal(arrays["causal_and_padding"], [[1, 0, 0], [1, 0, 0], [1, 0, 0]])
    assert PAD_ID == 0


def test_schedule_peaks_at_warmup():
    _, arrays = plot_schedule(d_model=64, warmup=100, total_steps=1000, compare=False)
    steps, lr = arrays["steps"], arrays["noam d_model=64 warmup=100"]
    assert steps[np.argmax(lr)] == 100
    assert lr.max() == pytest.approx(noam_lr(100, 64, 100))
    with pytest.raises(ValueError, match="unknown schedule"):
        plot_schedule(names=["nope"])


def test_schedule_from_a_training_config(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[model]\npreset = "tiny"\n[optim]\nwarmup_steps = 50\nlr_factor = 2.0\n'
                      '[train]\nmax_updates = 500\nschedule = "inverse_sqrt"\n')
    out = tmp_path / "s.png"
    assert main(["plot", "schedule", "--config", str(config), "--warmup", "60", "-o", str(out)]) == 0
    assert_picture(out, (1000, 700))
    args = build_parser().parse_args(["plot", "schedule", "--config", str(config), "--warmup", "60", "-o", str(out)])
    assert _schedule_settings(args) == {"d_model": 32, "warmup": 60, "factor": 2.0, "schedule": ["inverse_sqrt"],
                                        "steps": 500}


def test_complexity_arrays_and_bad_input(run_dir, tmp_path):
    from aiayn.plots import plot_complexity

    _, arrays = plot_complexity(run_dir / "layers.json")
    np.testing.assert_allclose(arrays["d16/self-attention"], [[8, 0.064], [32, 1.024], [128, 16.384]])
    (tmp_path / "bad.json").write_text("no json here\n")
    with pytest.raises(ValueError, match="layer_complexity"):
        plot_complexity(tmp_path / "bad.json")
    (tmp_path / "rows.json").write_text('{"rows": [1]}\n')  # an AttributeError before
    with pytest.raises(ValueError, match=r"rows.json: no layer_complexity rows"):
        plot_complexity(tmp_path / "rows.json")
    (tmp_path / "bytes.json").write_bytes(b'{"rows": \xff}\n')  # a decode error that named no file before
    with pytest.raises(ValueError, match=r"bytes.json:1: invalid UTF-8"):
        plot_complexity(tmp_path / "bytes.json")


def _plot_args(*argv):
    return build_parser().parse_args(["plot", *argv, "-o", "unused.png"])


def test_plot_flags_reach_the_plot_and_their_absence_leaves_its_defaults():
    from aiayn.commands.plot import _figure

    def scaling(*flags):
        return _figure(_plot_args("scaling", "--max-dk", "8", *flags), {"size": (320, 240)})[1]

    default, seven = scaling(), scaling("--seed", "7")
    np.testing.assert_array_equal(default["d_k"], [1, 2, 4, 8])
    np.testing.assert_array_equal(scaling("--seed", "0")["var_qk"], default["var_qk"])  # the plot's seed
    assert not np.array_equal(seven["var_qk"], default["var_qk"])
    masks = _figure(_plot_args("mask"), {"size": (320, 240)})[1]
    np.testing.assert_array_equal(masks["lengths"], [5, 3, 7])
    assert masks["causal"].shape == (6, 6)


@pytest.mark.parametrize("kind, flag, function, param", [
    ("positional", "--length", "plot_positional", "length"), ("positional", "--dims", "plot_positional", "dims"),
    ("mask", "--lengths", "plot_masks", "lengths"), ("mask", "--tgt-len", "plot_masks", "tgt_len"),
    ("scaling", "--seed", "plot_scaling", "seed"), ("scaling", "--max-dk", "plot_scaling", "dims"),
])
def test_plot_help_names_the_plot_functions_own_defaults(kind, flag, function, param):
    """The flags have no defaults of their own (None: the function's holds); their help texts say the
    function's default, and must keep saying it."""
    import inspect
    import re

    from aiayn import plots

    from cli_parsers import subcommand

    action = next(a for a in subcommand("plot", kind)._actions if flag in a.option_strings)
    assert action.default is None
    said = re.search(r"default (\S+?)\)", action.help).group(1)
    default = inspect.signature(getattr(plots, function)).parameters[param].default
    shown = str(max(default)) if param == "dims" and kind == "scaling" else ",".join(map(str, np.atleast_1d(default)))
    assert said == shown
