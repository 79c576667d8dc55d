"""`benchmarks/classifier_averaging.py`: it runs on a tiny config and prints its table; its figures are checked against the doors they measure."""

from __future__ import annotations


import pytest
import torch

from bench_helpers import labelled_corpus, last_json_line


def test_classifier_averaging_rows_agree_with_the_classify_door_and_aiayn_average(tmp_path):
    """Each model's row is the accuracy of its `load_pipeline` labels, the ensemble's that of the mean of
    the pipelines' label probabilities, the weight average's that of `aiayn average`'s model; `tune` reads
    the carved sentences of the training file (none of the phrases)."""
    from safetensors.torch import load_file, save_file
    from tiny_models import tiny_model

    from aiayn.cli import main
    from aiayn.tasks import load_pipeline
    from aiayn.tasks.classify import carve

    models = [tiny_model(tmp_path / name, "classify") for name in ("a", "b", "c")]
    generator = torch.Generator().manual_seed(1)
    for model in models[1:]:  # three different models of one config
        weights = load_file(model / "model.safetensors")
        save_file({k: v + 0.5 * torch.randn(v.shape, generator=generator) for k, v in weights.items()},
                  model / "model.safetensors")
    corpus, texts, gold = labelled_corpus(tmp_path)
    out = last_json_line("classifier_averaging.py", *map(str, models), "--corpus", str(corpus), "--split", "dev",
                         "--split", "tune", "--carve", "0.5", "--threads", "1", "--json")
    rows = {row["model"]: row for row in out["rows"]}

    def score(labels, split_gold):
        return pytest.approx(100.0 * sum(y == g for y, g in zip(labels, split_gold)) / len(split_gold))

    held = carve(texts, 0.5)[1]
    splits = {"dev": (texts, gold), "tune": ([texts[i] for i in held], [gold[i] for i in held])}
    assert 0 < len(held) < len(texts)
    for split, (xs, ys) in splits.items():
        answers = [load_pipeline(m)(xs) for m in models]
        for model, labels in zip(models, answers):
            assert rows[str(model)][split] == score([y for y, _ in labels], ys)
        positive = [sum(p if y == "pos" else 1 - p for y, p in each) / 3 for each in zip(*answers)]
        assert rows["ensemble (mean probability)"][split] == score(["pos" if p > 0.5 else "neg" for p in positive], ys)
    assert main(["average", *map(str, models), "-o", str(tmp_path / "soup")]) == 0
    for split, (xs, ys) in splits.items():
        assert rows["weight average"][split] == score([y for y, _ in load_pipeline(tmp_path / "soup")(xs)], ys)
    assert len({row["dev"] for row in out["rows"]}) > 1  # the models differ: the rows are not one figure
