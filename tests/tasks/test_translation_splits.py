"""A translation corpus of one TSV file is one split: it is not read again as the validation or test split."""

import pytest

from aiayn.data.corpus import CorpusError
from aiayn.tasks.translation import TranslationTask
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE

SETTINGS = ["train.max_updates=1", 'data.vocab_type="symbols"']


def tsv_corpus(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"a b {i % 5}\tb a {i % 5}\n" for i in range(30)), encoding="utf-8")
    return path


@pytest.mark.parametrize("splits, named", [
    (['data.test_split=""'], "data.valid_split = 'val'"),
    (['data.valid_split=""', 'data.test_split="test"'], "data.test_split = 'test'"),
    ([], "data.valid_split = 'val' and data.test_split = 'test'"),
])
def test_one_tsv_file_cannot_be_the_validation_or_test_split(tmp_path, splits, named):
    corpus = tsv_corpus(tmp_path)
    task = TranslationTask(load_config(None, [*SETTINGS, f'data.corpus="{corpus}"', 'data.test_split="test"', *splits]))
    with pytest.raises(CorpusError, match=f"{corpus}: one TSV file holds one split, the training pairs, so it cannot "
                                          f"also give {named}"):
        task.prepare(tmp_path / "run", SINGLE)


def test_one_tsv_file_trains_without_validation_and_test_splits(tmp_path):
    task = TranslationTask(load_config(None, [*SETTINGS, f'data.corpus="{tsv_corpus(tmp_path)}"',
                                              'data.valid_split=""', 'data.test_split=""']))
    task.prepare(tmp_path / "run", SINGLE)
    assert len(task.train_set) == 30 and task.valid_set is None


def separate_vocabularies(tmp_path, *settings):
    """A task whose source and target have vocabularies of their own, of equal size (the symbols of
    "a b i" and "b a i"), as sentencepiece makes them with `data.joint_vocab = false`."""
    task = TranslationTask(load_config(None, [*SETTINGS, f'data.corpus="{tsv_corpus(tmp_path)}"', "data.joint_vocab=false",
                                              'data.valid_split=""', 'data.test_split=""', *settings]))
    task.prepare(tmp_path / "run", SINGLE)
    assert not task.tokenizers.joint and task.tokenizers.src.vocab_size == task.tokenizers.tgt.vocab_size
    return task


def test_vocabularies_apart_of_equal_size_share_no_embedding(tmp_path):
    assert not separate_vocabularies(tmp_path).model_spec()[1].share_embeddings  # equal sizes once meant joint


@pytest.mark.parametrize("key", ["copy_attention", "share_embeddings"])
def test_vocabularies_apart_refuse_what_needs_a_joint_one(tmp_path, key):
    task = separate_vocabularies(tmp_path, f"model.{key}=true")
    with pytest.raises(ValueError, match=f"model.{key} = true needs a joint vocabulary"):
        task.model_spec()
