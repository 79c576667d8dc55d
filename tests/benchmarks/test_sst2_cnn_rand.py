"""`benchmarks/sst2_cnn_rand.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations


import pytest
import torch

from bench_helpers import benchmark, labelled_corpus, last_json_line


def test_cnn_rand_matches_kims_model_written_window_by_window():
    """Scores equal max-over-time of ReLU(w · window + b) over every window of the padded text, computed
    in loops; a text scores the same alone and beside a longer one; the constraint caps row norms at 3."""
    cnn = benchmark("sst2_cnn_rand")
    torch.manual_seed(0)
    model = cnn.CnnRand(n_words=6, n_classes=2, dim=4, maps=3).eval()
    vocab = {"a": 2, "b": 3, "c": 4, "d": 5}
    ids = cnn.batch_ids(["a b c"], vocab)[0]
    with torch.no_grad():
        x = model.embed(ids)  # (T, dim)
        pooled = []
        for conv in model.convs:
            width = conv.kernel_size[0]
            windows = [x[t:t + width].T for t in range(len(ids) - width + 1)]  # each (dim, width)
            pooled += [max(float(torch.relu((conv.weight[m] * w).sum() + conv.bias[m])) for w in windows)
                       for m in range(conv.out_channels)]
        expected = model.out(torch.tensor(pooled)).softmax(-1)
        alone = cnn.probabilities(model, ["a b c"], vocab)[0]
        beside = cnn.probabilities(model, ["a b c", "d a b c d a b c d e"], vocab)[0]
    assert torch.allclose(alone, expected, atol=1e-6) and torch.allclose(beside, alone, atol=1e-6)
    with torch.no_grad():
        model.out.weight.mul_(100.0)
    model.constrain()
    assert torch.allclose(model.out.weight.norm(dim=1), torch.full((2,), 3.0))


def test_sst2_cnn_rand_trains_on_the_recipes_split_and_scores_ours_as_the_door_does(tmp_path):
    from tiny_models import tiny_model

    from aiayn.tasks import load_pipeline

    corpus, texts, gold = labelled_corpus(tmp_path)
    ours = tiny_model(tmp_path / "ours", "classify")
    out = last_json_line("sst2_cnn_rand.py", "--corpus", str(corpus), "--carve", "0.5", "--epochs", "2",
                         "--seeds", "3", "--ours", str(ours), "--threads", "1", "--json")
    cnn_row, our_row = out["rows"]
    assert cnn_row["model"] == "CNN-rand, seed 3" and cnn_row["epoch"] in (1, 2)
    assert all(0 <= cnn_row[s] <= 100 for s in ("tune", "dev"))
    labels = [y for y, _ in load_pipeline(ours)(texts)]
    assert our_row["dev"] == pytest.approx(100.0 * sum(y == g for y, g in zip(labels, gold)) / len(gold))
