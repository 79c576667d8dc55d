"""data.extra_src_langs: many-to-one training (Johnson et al., 2017) on a line-aligned corpus of
several source languages; validation, test and the vocabulary's target side read one pair."""

import pytest

from aiayn.config import UNK_ID

from aiayn.tasks.translation import TranslationTask
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE


def corpus(directory, n_train=6, n_valid=3):
    """{split}.{de,fr,en}: each line of a split says the same thing in words of its own language."""
    directory.mkdir()
    for split, n in (("train", n_train), ("val", n_valid)):
        for lang in ("de", "fr", "en"):
            (directory / f"{split}.{lang}").write_text("".join(f"{lang}{i} {lang}w{i % 3}\n" for i in range(n)))
    return directory


def task(directory, *more):
    cfg = load_config(None, ["train.max_updates=1", f'data.corpus="{directory}"', 'data.src_lang="de"', 'data.tgt_lang="en"',
                             'data.train_split="train"', 'data.valid_split="val"', 'data.test_split=""',
                             'data.vocab_type="symbols"', *more])
    return TranslationTask(cfg)


def test_training_reads_every_source_language_and_validation_one(tmp_path):
    t = task(corpus(tmp_path / "c"), 'data.extra_src_langs=["fr"]')
    t.prepare(tmp_path / "run", SINGLE)
    src, tgt = t.tokenizers.src, t.tokenizers.tgt
    train = [(src.decode(s), tgt.decode(y)) for s, y in (t.train_set[i] for i in range(len(t.train_set)))]
    assert train == [(f"de{i} dew{i % 3}", f"en{i} enw{i % 3}") for i in range(6)] + \
                    [(f"fr{i} frw{i % 3}", f"en{i} enw{i % 3}") for i in range(6)]
    assert len(t.valid_set) == 3 and all(src.decode(t.valid_set[i][0]).startswith("de") for i in range(3))
    assert UNK_ID not in src.encode("fr5 frw2") and UNK_ID in src.encode("cs5")  # the vocabulary knows fr, not cs


def test_without_extra_sources_training_reads_one_pair(tmp_path):
    t = task(corpus(tmp_path / "c"))
    t.prepare(tmp_path / "run", SINGLE)
    assert len(t.train_set) == 6


@pytest.mark.parametrize("extra", ['["en"]', '["de"]', '["fr", "fr"]'])
def test_extra_sources_must_be_other_distinct_languages(tmp_path, extra):
    with pytest.raises(ValueError, match="data.extra_src_langs"):
        task(tmp_path, f"data.extra_src_langs={extra}")


@pytest.mark.parametrize("settings", [
    ['data.corpus="multi30k"', 'data.src_lang="de"', 'data.tgt_lang="en"', 'data.extra_src_langs=["fr"]'],
    ['task="aiayn.tasks.multilingual:MultilingualTranslationTask"', 'data.corpus="multi30k"', 'data.src_lang="en"',
     'data.tgt_langs=["de", "fr"]'],
    ['task="mlm"', 'model.type="encoder-only"', 'data.extra_texts=["a.txt"]']])
def test_a_saved_config_with_a_list_of_names_reads_back_identical(tmp_path, settings):
    from aiayn.training.config import save_config

    cfg = load_config(None, ["train.max_updates=1", *settings])
    assert not [name for name, value in vars(cfg.data).items() if isinstance(value, list)]  # frozen: tuples
    assert load_config(save_config(cfg, tmp_path / "run")) == cfg  # TOML's list is the config's tuple again


def test_multilingual_translation_refuses_a_one_file_corpus(tmp_path):
    """A TSV file holds one pair: it was read as every target's pairs and as every split's, so validation and
    test scored the training pairs, each once per target language."""
    from aiayn.data.corpus import CorpusError
    from aiayn.tasks import build_task

    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"en{i}\tde{i}\n" for i in range(6)))
    cfg = load_config(None, ["train.max_updates=1", 'task="aiayn.tasks.multilingual:MultilingualTranslationTask"',
                             f'data.corpus="{tsv}"', 'data.src_lang="en"', 'data.tgt_langs=["de", "fr"]',
                             'data.vocab_type="symbols"'])
    with pytest.raises(CorpusError, match="one TSV file holds one language pair"):
        build_task(cfg).check_test_split()
