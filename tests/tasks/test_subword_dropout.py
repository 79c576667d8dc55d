"""BPE-dropout in training (`data.subword_dropout`, Provilkov et al., 2020): each epoch segments the
same training pairs afresh, reproducibly; validation keeps the fixed segmentation."""

import random

import pytest

from aiayn.config import ConfigError
from aiayn.tasks.translation import TranslationTask
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE

SETTINGS = ["train.max_updates=1", 'data.src_lang="x"', 'data.tgt_lang="y"', 'data.vocab_type="bpe"',
            "data.vocab_size=330", "data.max_tokens=600"]


def write_corpus(directory) -> str:
    """Sentences of made-up words (x) and the same words reversed (y), train and val."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 8))) for _ in range(60)]
    for split, n in (("train", 400), ("val", 20)):
        lines = [[rng.choice(words) for _ in range(rng.randint(2, 9))] for _ in range(n)]
        (directory / f"{split}.x").write_text("".join(" ".join(w) + "\n" for w in lines))
        (directory / f"{split}.y").write_text("".join(" ".join(reversed(w)) + "\n" for w in lines))
    return str(directory)


def epoch_ids(batches) -> list[list[list[int]]]:
    return [[b.src.tolist(), b.tgt_out.tolist()] for b in batches]


def texts(task, batches) -> list[tuple[str, str]]:
    """The (source, target) text of every pair in `batches`, sorted."""
    tok = task.tokenizers
    return sorted((tok.src.decode(s), tok.tgt.decode(t))
                  for b in batches for s, t in zip(b.src.tolist(), b.tgt_out.tolist()))


def prepared(tmp_path, p: float, *more: str) -> TranslationTask:
    tmp_path.mkdir()
    corpus = write_corpus(tmp_path)
    task = TranslationTask(load_config(None, [*SETTINGS, f'data.corpus="{corpus}"', f"data.subword_dropout={p}", *more]))
    task.prepare(tmp_path / "run", SINGLE)
    return task


def test_each_epoch_segments_the_same_pairs_afresh(tmp_path):
    task = prepared(tmp_path / "a", 0.3)
    batches = task.train_data(SINGLE)
    first, again, second = batches(0), batches(0), batches(1)
    assert epoch_ids(first) == epoch_ids(again)  # resuming in epoch 0 sees the batches it left
    assert epoch_ids(first) != epoch_ids(second)
    fixed = prepared(tmp_path / "b", 0.0)
    assert texts(task, first) == texts(task, second) == texts(fixed, fixed.train_data(SINGLE)(0))  # no pair lost or torn
    n_tokens = lambda bs: sum(b.n_tgt_tokens for b in bs)  # noqa: E731
    assert n_tokens(first) > n_tokens(fixed.train_data(SINGLE)(0))  # smaller pieces
    assert epoch_ids(task.valid_data()) == epoch_ids(fixed.valid_data())  # validation: the fixed segmentation


@pytest.mark.parametrize("sets, message", [
    (['data.vocab_type="symbols"', "data.subword_dropout=0.1"], "needs vocab_type = 'bpe'"),
    (["data.subword_dropout=1.0"], "subword_dropout must be in"),
])
def test_bad_subword_dropout_is_a_config_error(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*SETTINGS, *sets])


def test_a_large_seed_is_taken(tmp_path):
    task = TranslationTask(load_config(None, [*SETTINGS, f'data.corpus="{write_corpus(tmp_path)}"',
                                              "data.subword_dropout=0.3", "train.seed=123456789"]))
    task.prepare(tmp_path / "run", SINGLE)
    batches = task.train_data(SINGLE)
    assert epoch_ids(batches(3)) == epoch_ids(batches(3)) != epoch_ids(batches(4))


def test_pairs_an_epochs_segmentation_makes_too_long_are_counted(tmp_path):
    """With data.max_length at the fixed segmentation's longest side, nothing is dropped in `prepare`;
    an epoch's longer segmentation drops some pairs, and each is counted (and warned about)."""
    fixed = prepared(tmp_path / "a", 0.0)
    longest = int(max(fixed.train_set.src_lengths.max(), fixed.train_set.tgt_lengths.max()))
    task = prepared(tmp_path / "b", 0.3, f"data.max_length={longest}")
    assert len(task.train_set) == len(fixed.train_set)
    trained = sum(len(b.src) for b in task.train_data(SINGLE)(0))
    assert 0 < len(task.train_set) - trained == task.drops.of("train")["too_long_segmented"]
