"""Kim (2014)'s CNN-rand on the SST-2 recipe's own split: the from-scratch anchor, rerun here.

Issue 32 asks the SST-2 recipe for RNTN's 85.4%. The from-scratch anchor below it is Kim 2014's
CNN-rand (Table 2: 82.7 on the test sentences; 83.5 in harvardnlp's rerun). This script trains that
model on exactly what `recipes/sst2-classify.toml` trains on (the training file's phrases less the
carved tuning sentences and all their phrases, `aiayn.tasks.classify.carve`), chooses the epoch on
the tuning split, and scores dev once: beside our classifiers (`--ours MODEL`, scored on the same
sentences), it says whether a gap to 85.4 is our model's or the data's.

Kim's model, §2 and §3.1: words as 300-dim vectors learned from random (no pre-training), filters of
widths 3, 4, 5 with 100 maps each, ReLU, max-over-time pooling, dropout 0.5 on the pooled features,
the softmax weights' rows rescaled to L2 norm ≤ 3, Adadelta (ρ 0.95), batches of 50, 25 epochs;
each sentence padded with zero vectors (`batch_ids`). Words are whitespace tokens (the
corpus is PTB-tokenized); a word never seen in training reads as one shared unknown vector.
Written out here (plain torch) because no maintained library holds Kim's model; nothing of it
enters aiayn.

    python benchmarks/sst2_cnn_rand.py --corpus ../shared/data/sst2 --seeds 1 2 3 \\
        [--ours runs/sst2-classify/model] [--epochs 25] [--json]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import add_common_arguments, emit_json, format_table, set_threads
from classifier_averaging import accuracy, labelled
from torch import Tensor, nn

from aiayn.tasks.classify import Classifier, carve

PAD, UNK = 0, 1
WIDTHS = (3, 4, 5)


class CnnRand(nn.Module):
    """Kim (2014)'s CNN for sentence classification with randomly initialised word vectors."""

    def __init__(self, n_words: int, n_classes: int, dim: int = 300, maps: int = 100, dropout: float = 0.5):
        super().__init__()
        self.embed = nn.Embedding(n_words, dim, padding_idx=PAD)
        nn.init.uniform_(self.embed.weight, -0.25, 0.25)  # Kim's range for words without a pre-trained vector
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        self.convs = nn.ModuleList(nn.Conv1d(dim, maps, w) for w in WIDTHS)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(maps * len(WIDTHS), n_classes)

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) padded word ids -> (B, n_classes) scores."""
        x = self.embed(ids).transpose(1, 2)  # (B, dim, T)
        pooled = [F.relu(conv(x)).amax(dim=2) for conv in self.convs]  # each (B, maps): max over time
        return self.out(self.dropout(torch.cat(pooled, dim=1)))

    @torch.no_grad()
    def constrain(self, max_norm: float = 3.0) -> None:
        """Rescale each softmax weight row to L2 norm ≤ max_norm (Kim §2.1)."""
        self.out.weight.copy_(torch.renorm(self.out.weight, p=2, dim=0, maxnorm=max_norm))


def vocabulary(texts: list[str]) -> dict[str, int]:
    """Every training word -> its id (after PAD and UNK)."""
    words = sorted({w for text in texts for w in text.split()})
    return {w: i for i, w in enumerate(words, start=UNK + 1)}


def batch_ids(texts: list[str], vocab: dict[str, int]) -> Tensor:
    """(B, T) ids: each text with max(WIDTHS) - 1 PADs before it and max(WIDTHS) after (so every row
    holds an all-PAD window of each width, as all but Kim's longest sentences do, and padding a batch
    to its longest row adds no new window value: a text scores the same in any batch)."""
    width = max(WIDTHS)
    rows = [[PAD] * (width - 1) + [vocab.get(w, UNK) for w in text.split()] + [PAD] * width for text in texts]
    longest = max(map(len, rows))
    return torch.tensor([row + [PAD] * (longest - len(row)) for row in rows])


@torch.no_grad()
def probabilities(model: CnnRand, texts: list[str], vocab: dict[str, int], batch: int = 500) -> Tensor:
    """(N, n_classes) class probabilities of `texts`, in eval mode."""
    model.eval()
    return torch.cat([model(batch_ids(texts[i:i + batch], vocab)).softmax(-1) for i in range(0, len(texts), batch)])


def train(splits: dict, names: list[str], seed: int, epochs: int, batch: int) -> dict:
    """Train CNN-rand on `splits["train"]`, keep the epoch best on `tune`, score every split once with it."""
    torch.manual_seed(seed)
    texts, labels = splits["train"]
    vocab = vocabulary(texts)
    gold = torch.tensor([names.index(y) for y in labels])
    model = CnnRand(len(vocab) + UNK + 1, len(names))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    best, best_epoch, best_state, start = -1.0, 0, None, time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        for rows in torch.randperm(len(texts)).split(batch):
            loss = F.cross_entropy(model(batch_ids([texts[i] for i in rows], vocab)), gold[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.constrain()
        tune = accuracy(probabilities(model, splits["tune"][0], vocab), splits["tune"][1], names)
        print(f"seed {seed} epoch {epoch}: tune {tune:.2f}% ({(time.perf_counter() - start) / 60:.1f} min)",
              file=sys.stderr, flush=True)
        if tune > best:
            best, best_epoch, best_state = tune, epoch, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    scores = {s: accuracy(probabilities(model, x, vocab), y, names) for s, (x, y) in splits.items() if s != "train"}
    return {"model": f"CNN-rand, seed {seed}", "epoch": best_epoch, **scores,
            "minutes": (time.perf_counter() - start) / 60}


def ours(model_dir: Path, splits: dict, names: list[str]) -> dict:
    """One of our classifiers scored on the same sentences."""
    classifier = Classifier.from_pretrained(model_dir)
    return {"model": str(model_dir), **{s: accuracy(classifier.probabilities(classifier.inputs(x)), y, names)
                                        for s, (x, y) in splits.items() if s != "train"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="the SST-2 directory (train_full.tsv[.gz], dev.tsv[.gz])")
    parser.add_argument("--train-split", default="train_full", help="the training file; tune is carved from it")
    parser.add_argument("--carve", type=float, default=0.1, help="tune's share of the training file (the recipe's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="one CNN-rand run per seed")
    parser.add_argument("--epochs", type=int, default=25, help="Kim's 25")
    parser.add_argument("--batch", type=int, default=50, help="Kim's 50")
    parser.add_argument("--ours", type=Path, nargs="*", default=[], help="our classifier model directories to score beside it")
    add_common_arguments(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    texts, labels = labelled(args.corpus, args.train_split, args.train_split, 0.0)
    train_rows, _ = carve(texts, args.carve)  # the recipe's split: the same hash
    splits = {"train": ([texts[i] for i in train_rows], [labels[i] for i in train_rows]),
              "tune": labelled(args.corpus, "tune", args.train_split, args.carve),
              "dev": labelled(args.corpus, "dev", args.train_split, args.carve)}
    names = sorted(set(splits["train"][1]))
    rows = [train(splits, names, seed, args.epochs, args.batch) for seed in args.seeds]
    rows += [ours(m, splits, names) for m in args.ours]
    print(f"accuracy (%): trained on {len(splits['train'][0]):,} texts, the epoch chosen on tune, dev scored once")
    print(format_table(rows, [("model", "model", ""), ("epoch", "epoch", ""),
                              ("tune", f"tune ({len(splits['tune'][0])})", ".2f"),
                              ("dev", f"dev ({len(splits['dev'][0])})", ".2f"), ("minutes", "min", ".1f")]))
    if args.json:
        emit_json({"benchmark": "sst2_cnn_rand", "rows": rows})


if __name__ == "__main__":
    main()
