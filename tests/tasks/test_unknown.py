"""A corpus the vocabulary does not cover (another run's `data.tokenizer`) is said, not trained on silently."""

import logging

from aiayn.config import UNK_ID
from aiayn.data.preprocess import ParallelDataset
from aiayn.tasks.seq2seq import UNKNOWN_WARNING, warn_unknown


def test_a_corpus_of_unknown_tokens_is_warned_about_naming_the_side_and_the_vocabulary(caplog):
    known = 7
    covered = ParallelDataset.from_ids([[known] * 100], [[known] * 99 + [UNK_ID]])  # 1% <unk>
    uncovered = ParallelDataset.from_ids([[known] * 50 + [UNK_ID] * 50], [[known] * 10])  # half the source
    assert 0.01 < UNKNOWN_WARNING < 0.5
    with caplog.at_level(logging.WARNING):
        warn_unknown(covered, "c split 'train'", "runs/other/model")
        assert caplog.text == ""
        warn_unknown(uncovered, "c split 'train'", "runs/other/model")
    assert caplog.text.count("<unk>") == 1
    assert ("c split 'train': 50.0% of the source tokens are <unk>; the vocabulary (data.tokenizer = "
            "runs/other/model) does not cover this text") in caplog.text
