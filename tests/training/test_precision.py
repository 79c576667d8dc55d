"""bf16 autocast reaches about the same validation loss as fp32 on the demo task."""

import pytest

from aiayn.cli import main
from aiayn.plots.curves import read_metrics

RECIPE = """
[model]
preset = "tiny"
[optim]
warmup_steps = 100
lr_factor = 2.0
[data]
corpus = "synthetic"
task = "copy"
vocab_type = "symbols"
n_train = 5000
n_valid = 200
max_len = 8
max_tokens = 2000
[train]
max_updates = 400
validate_every = 400
bleu = false
progress = false
"""


@pytest.mark.slow
def test_bf16_matches_fp32_validation_loss(tmp_path):
    recipe = tmp_path / "copy.toml"
    recipe.write_text(RECIPE)
    nll = {}
    for precision in ("fp32", "bf16"):
        run_dir = tmp_path / precision
        assert main(["train", str(recipe), "--run-dir", str(run_dir), "--set", f"train.precision={precision}"]) == 0
        nll[precision] = [r["nll"] for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "valid"][-1]
    assert nll["fp32"] < 0.5, nll  # it learned
    assert abs(nll["bf16"] - nll["fp32"]) < 0.1 + 0.25 * nll["fp32"], nll
