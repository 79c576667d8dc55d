"""Classifiers alone, as an ensemble and as a weight average: accuracy on labelled splits.

Issue 32 lists averaging among what may lift a recipe. For classifiers fine-tuned from one start
(e.g. one MLM model under several settings) this measures each model, their ensemble (the mean of
their class probabilities) and, where they are one model (configs alike but for dropout), the mean
of their weights (a "model soup", Wortsman et al. 2022: one model at one model's cost; what
`aiayn average` writes).

A split is a labelled TSV of the corpus (`dev`), or `tune`: the tuning sentences carved from the
training file as `data.carve_fraction` carves them (`aiayn.tasks.classify.carve`).

    python benchmarks/classifier_averaging.py runs/sst2-cls-x/model runs/sstv-lr025/model \\
        --corpus ../shared/data/sst2 --split tune --split dev [--carve 0.1] [--json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import add_common_arguments, emit_json, format_table, set_threads

from aiayn.data.records import record_file
from aiayn.data.tokenizer import load_tokenizers
from aiayn.tasks.classify import Classifier, carve, read_labelled
from aiayn.training.average import DifferentModels, average_checkpoints, check_same_vocabulary


def labelled(corpus: str, split: str, train_split: str, fraction: float) -> tuple[list[str], list[str]]:
    """(texts, labels) of `split`; "tune" is the carved share of `train_split`'s file."""
    if split != "tune":
        texts, labels, _ = read_labelled(record_file(corpus, split, (".tsv", ".tsv.gz")))
        return texts, labels
    texts, labels, _ = read_labelled(record_file(corpus, train_split, (".tsv", ".tsv.gz")))
    held = carve(texts, fraction)[1]
    return [texts[i] for i in held], [labels[i] for i in held]


def accuracy(probs: torch.Tensor, labels: list[str], names: list[str]) -> float:
    """% of rows whose most probable class is the gold label."""
    gold = torch.tensor([names.index(y) for y in labels])
    return 100.0 * float((probs.argmax(-1) == gold).float().mean())


def soup(models: list[Path], first: Classifier) -> Classifier | None:
    """The weight average of `models` as a Classifier with `first`'s (the first model's, loaded)
    vocabulary and labels, or None where they are different models (configs that differ beyond
    dropout, or other vocabularies)."""
    try:
        check_same_vocabulary(models, load_tokenizers(models[0]), models[0])
        averaged = average_checkpoints(models)
    except DifferentModels:
        return None
    return Classifier(averaged, first.tokenizer, first.labels, first.max_length)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="classifier model directories (aiayn train's model/)")
    parser.add_argument("--corpus", required=True, help="the classification corpus directory (split.tsv[.gz])")
    parser.add_argument("--split", dest="splits", action="append", default=[], help="dev, tune, ... (repeatable)")
    parser.add_argument("--train-split", default="train_full", help="the training file that tune is carved from")
    parser.add_argument("--carve", type=float, default=0.1, help="tune's share of the training file (the recipe's)")
    add_common_arguments(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    splits = {s: labelled(args.corpus, s, args.train_split, args.carve) for s in args.splits or ["dev"]}
    classifiers = {str(m): Classifier.from_pretrained(m) for m in args.models}
    names = next(iter(classifiers.values())).labels
    if any(c.labels != names for c in classifiers.values()):
        raise SystemExit("the models' labels differ: they cannot be averaged")
    probs = {m: {s: c.probabilities(c.inputs(texts)) for s, (texts, _) in splits.items()} for m, c in classifiers.items()}
    probs["ensemble (mean probability)"] = {s: torch.stack([p[s] for p in probs.values()]).mean(0) for s in splits}
    averaged = soup(args.models, classifiers[str(args.models[0])])
    if averaged is not None:
        probs["weight average"] = {s: averaged.probabilities(averaged.inputs(texts)) for s, (texts, _) in splits.items()}
    rows = [{"model": m, **{s: accuracy(p[s], splits[s][1], names) for s in splits}} for m, p in probs.items()]
    print(f"accuracy (%) of {len(args.models)} classifiers and their ensemble"
          + (", and of their weight average" if averaged is not None else "; no weight average: they are different models"))
    print(format_table(rows, [("model", "model", ""), *[(s, f"{s} ({len(splits[s][0])})", ".2f") for s in splits]]))
    if args.json:
        emit_json({"benchmark": "classifier_averaging", "rows": rows})


if __name__ == "__main__":
    main()
