"""SST's phrase structure put to use two ways for the SST-2 recipe; issue 32's rows, neither kept.

SST-2's training file holds every labelled phrase of each training sentence (Socher et al. 2013);
a whole sentence is a text that is no phrase of another (`aiayn.tasks.classify.whole_texts`).

    spans       fine-tune the recipe's MLM model on the whole training sentences, each labelled
                phrase of a sentence a loss *in context*: the mean of the encoder's final states
                over the phrase's tokens, through the classifier (the sentence itself is the whole
                span, and is scored that way on tune and dev). RNTN's tree supervision without its
                parse. The schedule and the carve are recipes/sst2-classify.toml's; the best of the
                validations on the carved tuning split is kept and dev scored once with it.
    oversample  write a copy of the corpus in which every whole training sentence stands `--times`
                times (against the length shift from phrases to dev's sentences), for
                `aiayn train recipes/sst2-classify.toml --set 'data.corpus="OUT"'`.

    python benchmarks/sst2_phrases.py spans runs/sst2-mlm/model --seeds 3 4 5 [--phrase-weight 1.0] [--json]
    python benchmarks/sst2_phrases.py oversample /tmp/sst2-os [--times 3]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gzip
import random
import shutil
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import add_common_arguments, emit_json, format_table, set_threads
from classifier_averaging import accuracy
from torch import Tensor

from aiayn.data.records import record_file
from aiayn.data.tokenizer import load_tokenizers
from aiayn.io import atomic_dir, check_replaceable
from aiayn.decoding.common import pad_sources
from aiayn.models import build_model, read_config
from aiayn.tasks.classify import carve, inner_texts, read_labelled, whole_texts
from aiayn.training.config import load_config
from aiayn.training.pipeline import load_matching
from aiayn.training.schedule import adam, lr_function

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-classify.toml"
PAD_ID = 0


@dataclasses.dataclass
class Sentence:
    """A whole sentence's token ids and its labelled phrases as token spans [start, end) with a class."""
    ids: list[int]
    spans: list[tuple[int, int, int]]


def word_starts(tokenizer, text: str) -> tuple[list[int], list[int]]:
    """(token ids, where each word's tokens start, and one past the last): the words are encoded
    one by one, which for sentencepiece is the text's own encoding (no piece spans a space)."""
    ids, starts = [], []
    for word_ids in tokenizer.encode_batch(text.split()):
        starts.append(len(ids))
        ids.extend(word_ids)
    return ids, starts + [len(ids)]


def sentences(texts: list[str], labels: list[int], tokenizer, limit: int) -> tuple[list[Sentence], int]:
    """The whole sentences of a training split with their labelled phrases, and how many were left
    out for being over `limit` tokens."""
    label_of = dict(zip(texts, labels))
    out, skipped = [], 0
    for text in sorted(whole_texts(inner_texts(texts))):
        ids, starts = word_starts(tokenizer, text)
        if len(ids) > limit:
            skipped += 1
            continue
        words, spans = text.split(), []
        for i in range(len(words)):
            for j in range(i + 1, len(words) + 1):
                phrase = " ".join(words[i:j])  # the sentence itself when i, j = 0, len(words)
                if phrase in label_of:
                    spans.append((starts[i], starts[j], label_of[phrase]))
        out.append(Sentence(ids, spans))
    return out, skipped


def span_scores(model, tokens: Tensor, spans: Tensor) -> Tensor:
    """(B, T) ids and (N, 3) spans [row, start, end) -> (N, C) scores of each span's mean final state."""
    h = model.encode(tokens)[0][:, 1:]  # (B, T, D), [CLS] dropped
    sums = F.pad(h.cumsum(1), (0, 0, 1, 0))  # (B, T + 1, D): sums[:, j] = h[:, :j].sum(1)
    row, start, end = spans.unbind(1)
    mean = (sums[row, end] - sums[row, start]) / (end - start).unsqueeze(1).to(h.dtype)  # (N, D)
    return model.classifier(mean)


@torch.inference_mode()
def probabilities(model, ids: list[list[int]], batch: int = 128) -> Tensor:
    """(N, C) class probabilities of whole texts, each scored as one span, in eval mode."""
    model.eval()
    out = []
    for k in range(0, len(ids), batch):
        chunk = ids[k:k + batch]
        spans = torch.tensor([(b, 0, len(x)) for b, x in enumerate(chunk)])
        out.append(span_scores(model, pad_sources(chunk, PAD_ID), spans).float().softmax(-1))
    model.train()
    return torch.cat(out)


def batch_loss(model, batch: list[Sentence], phrase_weight: float, label_smoothing: float) -> Tensor:
    """The weighted mean loss over every labelled span of `batch` (the sentence's own at weight 1)."""
    spans = [(b, i, j, y) for b, s in enumerate(batch) for i, j, y in s.spans]
    table = torch.tensor(spans)  # (N, 4)
    whole = torch.tensor([j - i == len(batch[b].ids) for b, i, j, _ in spans])
    weight = torch.where(whole, 1.0, phrase_weight)
    scores = span_scores(model, pad_sources([s.ids for s in batch], PAD_ID), table[:, :3]).float()
    losses = F.cross_entropy(scores, table[:, 3], reduction="none", label_smoothing=label_smoothing)
    return (losses * weight).sum() / weight.sum()


def length_batches(data: list[Sentence], size: int, rng: random.Random) -> list[list[Sentence]]:
    """Batches of `size` sentences of about one length (sorted with a little noise), in random order."""
    order = sorted(range(len(data)), key=lambda k: len(data[k].ids) + rng.random() * 4)
    batches = [[data[k] for k in order[i:i + size]] for i in range(0, len(order), size)]
    rng.shuffle(batches)
    return batches


def fine_tune(mlm_dir: Path, cfg, data: list[Sentence], evals: dict, names: list[str], seed: int, *,
              updates: int, batch_size: int, validate_every: int, phrase_weight: float) -> dict:
    """One run from `mlm_dir` (the trainer's `load_matching`, the recipe's optimiser and schedule):
    `updates` updates of `batch_size` sentences, tune accuracy every `validate_every`, dev scored with the best."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model_type, config = read_config(mlm_dir)
    model = build_model(model_type, dataclasses.replace(config, n_classes=len(names)))
    load_matching(model, mlm_dir)
    optim = cfg.optim
    lr_at = lr_function(cfg.train.schedule, config.d_model, optim.warmup_steps, optim.lr_factor)
    optimizer = adam(model.parameters(), optim, lr_at(1))
    model.train()
    best, best_update, best_state, update = -1.0, 0, None, 0
    while update < updates:
        for batch in length_batches(data, batch_size, rng):
            update += 1
            for group in optimizer.param_groups:
                group["lr"] = lr_at(update)
            loss = batch_loss(model, batch, phrase_weight, optim.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
            optimizer.step()
            if update % validate_every == 0:
                tune = accuracy(probabilities(model, evals["tune"][0]), evals["tune"][1], names)
                if tune > best:
                    best, best_update, best_state = tune, update, copy.deepcopy(model.state_dict())
            if update == updates:
                break
    model.load_state_dict(best_state)
    return {"seed": seed, "phrase_weight": phrase_weight, "update": best_update, "tune": best,
            "dev": accuracy(probabilities(model, evals["dev"][0]), evals["dev"][1], names)}


def spans_main(args) -> None:
    cfg = load_config(args.recipe)
    data_cfg = cfg.data
    corpus = args.corpus or data_cfg.corpus
    texts, labels, _ = read_labelled(record_file(corpus, data_cfg.train_split, (".tsv", ".tsv.gz")))
    train, held = carve(texts, data_cfg.carve_fraction)
    names = sorted(set(labels))
    tokenizer = load_tokenizers(args.mlm_dir).src
    limit = data_cfg.max_input_tokens
    data, skipped = sentences([texts[i] for i in train], [names.index(labels[i]) for i in train], tokenizer, limit)
    dev_texts, dev_labels, _ = read_labelled(record_file(corpus, data_cfg.test_split, (".tsv", ".tsv.gz")))
    evals = {"tune": ([word_starts(tokenizer, texts[i])[0][:limit] for i in held], [labels[i] for i in held]),
             "dev": ([word_starts(tokenizer, t)[0][:limit] for t in dev_texts], dev_labels)}
    print(f"{len(data):,} whole training sentences ({skipped} over {limit} tokens left out) with "
          f"{sum(len(s.spans) for s in data):,} labelled spans; tune {len(held)}, dev {len(dev_texts)}", file=sys.stderr)
    rows = [fine_tune(args.mlm_dir, cfg, data, evals, names, seed, updates=args.updates, batch_size=args.batch,
                      validate_every=args.validate_every, phrase_weight=args.phrase_weight) for seed in args.seeds]
    print(f"accuracy (%): {args.updates} updates from {args.mlm_dir}, the best on tune (every "
          f"{args.validate_every}), dev scored once")
    print(format_table(rows, [("seed", "seed", ""), ("phrase_weight", "phrase weight", ""),
                              ("update", "best update", ""), ("tune", "tune", ".2f"), ("dev", "dev", ".2f")]))
    if args.json:
        emit_json({"benchmark": "sst2_phrases spans", "rows": rows})


def oversample_main(args) -> None:
    """Every whole text of the training file `args.times` times, the rest as they are; the other
    files of the corpus copied beside it."""
    source = record_file(args.corpus, args.train_split, (".tsv", ".tsv.gz"))
    check_replaceable(args.out, lambda d: (d / f"{args.train_split}.tsv.gz").is_file(), "an oversampled corpus",
                      sources=[args.corpus])
    texts, labels, _ = read_labelled(source)
    whole = whole_texts(inner_texts(texts))
    lines = [f"{t}\t{y}\n" for t, y in zip(texts, labels) for _ in range(args.times if t in whole else 1)]
    with atomic_dir(args.out) as out:  # a failure or Ctrl-C leaves no half-written corpus
        with gzip.open(out / f"{args.train_split}.tsv.gz", "wt", encoding="utf-8") as f:
            f.write("sentence\tlabel\n" + "".join(lines))
        for other in Path(args.corpus).iterdir():
            if other.is_file() and other.name != source.name:
                shutil.copy(other, out / other.name)
    print(f"{args.out}: {len(lines):,} training texts ({len(texts):,} in {source}; "
          f"{sum(t in whole for t in texts):,} whole sentences {args.times} times)")
    if args.json:
        emit_json({"benchmark": "sst2_phrases oversample", "texts": len(lines), "whole": len(whole)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    spans = modes.add_parser("spans", help="fine-tune with every labelled phrase as a loss in context")
    spans.add_argument("mlm_dir", type=Path, help="the MLM model directory (recipes/sst2-mlm.toml's model)")
    spans.add_argument("--recipe", type=Path, default=RECIPE, help="the classifier recipe whose data and schedule to use")
    spans.add_argument("--corpus", help="the SST-2 directory (default: the recipe's data.corpus)")
    spans.add_argument("--seeds", type=int, nargs="+", default=[1])
    spans.add_argument("--phrase-weight", type=float, default=1.0, help="a phrase's loss weight; the sentence's is 1")
    spans.add_argument("--updates", type=int, default=2000)
    spans.add_argument("--batch", type=int, default=64, help="sentences per update")
    spans.add_argument("--validate-every", type=int, default=25)
    over = modes.add_parser("oversample", help="write a corpus copy with every whole training sentence --times times")
    over.add_argument("out", type=Path, help="the directory to write")
    over.add_argument("--corpus", default="../shared/data/sst2")
    over.add_argument("--train-split", default="train_full")
    over.add_argument("--times", type=int, default=3)
    for mode in (spans, over):
        add_common_arguments(mode)
    args = parser.parse_args()
    set_threads(args.threads)
    spans_main(args) if args.mode == "spans" else oversample_main(args)


if __name__ == "__main__":
    main()
