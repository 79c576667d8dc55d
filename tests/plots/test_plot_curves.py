import json

import numpy as np
import pytest

from aiayn.plots import curves, save_png
from plot_helpers import assert_picture


def _rows():
    rows = []
    for step in range(1, 201, 10):
        rows.append({"step": step, "epoch": 0, "split": "train", "loss": 5.0 / step**0.3, "nll": 4.0 / step**0.3,
                     "ppl": float(np.exp(4.0 / step**0.3)), "lr": 1e-3 * min(1, step / 50), "tokens_per_s": 1000.0,
                     "time": step * 0.1})
        if step % 50 == 1:
            rows.append({"step": step, "epoch": 0, "split": "valid", "loss": 4.0 / step**0.3,
                         "nll": 3.5 / step**0.3, "ppl": float(np.exp(3.5 / step**0.3)), "bleu": step / 10,
                         "time": step * 0.1})
    return rows


def _write(path, rows, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def test_reads_a_file_still_being_written(tmp_path):
    rows = _rows()
    partial = json.dumps({"step": 999, "split": "train", "loss": 1.0})[:-9]  # cut mid-number
    _write(tmp_path / "metrics.jsonl", rows, tail=partial)
    assert curves.read_metrics(tmp_path) == rows  # run directory; the unfinished row is skipped
    fig, arrays = curves.plot_curves(tmp_path, size=(640, 480))
    steps, loss = arrays["train/loss"]
    assert steps.max() < 999 and len(loss) == sum(r["split"] == "train" for r in rows)
    assert_picture(save_png(fig, tmp_path / "c.png"), (640, 480))


def test_bad_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "split": "train", "loss": 2}\n{"step": 2, "spl\n{"step": 3, "split": "train"}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        curves.read_metrics(path)


@pytest.mark.parametrize("row, message", [('{"step": 2, "split": "train", "loss": "abc"}', "loss must be a number, got 'abc'"),
                                          ('{"step": "2", "split": "train"}', "expected a JSON object with a numeric 'step'")])
def test_a_value_that_is_no_number_names_file_and_line(tmp_path, row, message):
    """It failed in numpy, far from the file: "could not convert string to float"."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "split": "train", "loss": 2}\n' + row + "\n")
    with pytest.raises(ValueError, match=f"metrics.jsonl:2: {message}"):
        curves.read_metrics(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics"):
        curves.read_metrics(tmp_path)


def test_series_split_bleu_and_ppl_from_nll(tmp_path):
    rows = [{"step": 1, "split": "train", "loss": 3.0, "nll": 2.0},
            {"step": 2, "split": "valid", "loss": 2.5, "nll": 1.0, "bleu": 12.5},
            {"step": 3, "split": "train", "loss": None, "nll": 1.5}]  # non-finite values are written as null
    _, arrays = curves.plot_curves(rows)
    np.testing.assert_array_equal(arrays["train/loss"][0], [1.0])
    np.testing.assert_allclose(arrays["train/ppl"][1], np.exp([2.0, 1.5]))
    np.testing.assert_array_equal(arrays["valid/bleu"][1], [12.5])
    assert "train/bleu" not in arrays and "train/lr" not in arrays


def test_learning_rate_is_drawn_once():
    rows = [{"step": 1, "split": "train", "lr": 0.1}, {"step": 1, "split": "valid", "lr": 0.1, "loss": 1.0}]
    fig, arrays = curves.plot_curves(rows)
    assert "train/lr" in arrays and "valid/lr" not in arrays
    assert len(fig.axes[3].lines) == 1


def test_empty_file_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="no metrics"):
        curves.plot_curves(tmp_path)


def test_a_png_goes_through_a_link_and_refuses_another_format_s_name(tmp_path):
    from aiayn.plots._figure import new_figure

    fig = new_figure((100, 80))
    (tmp_path / "real.png").write_bytes(b"old")
    (tmp_path / "link.png").symlink_to("real.png")
    save_png(fig, tmp_path / "link.png")
    assert (tmp_path / "link.png").is_symlink() and (tmp_path / "real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match=r"x\.jpg: plots are written as PNG"):
        save_png(fig, tmp_path / "x.jpg")
    assert not (tmp_path / "x.jpg").exists()
