"""Nothing is dropped silently (issue 28): every cut, skipped or filtered example is counted, logged
once at WARNING and written into test_scores.json; the QA carve takes only the training files' stories."""

import json
import logging

import pytest
import torch

from aiayn.models import build_model
from aiayn.tasks.classify import ClassifyTask
from aiayn.tasks.lm import Generator
from aiayn.tasks.translation import TranslationTask
from aiayn.training.config import load_config
from aiayn.distributed import SINGLE
from test_summarization_qa import babi_task, stories, summarization_task, write_jsonl


def finished_model(task, directory):
    """A model directory as `aiayn train` leaves it (random weights: the drops do not depend on them)."""
    torch.manual_seed(0)
    model_type, config = task.model_spec()
    build_model(model_type, config).save_pretrained(directory)
    task.save_extras(directory)
    return directory


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_qa_carve_takes_only_the_training_files_stories(tmp_path):
    (tmp_path / "qa1_x_train.txt").write_text(stories(100, unique=True))
    (tmp_path / "qa1_x_test.txt").write_text(stories(60))
    task = babi_task(tmp_path, 0.3, 'data.test_split="qa*_test.txt"')
    train, valid, test = task.examples("qa*_train.txt"), task.examples("valid"), task.examples("qa*_test.txt")
    assert len(train.src) + len(valid.src) == 100 and 10 < len(valid.src) < 50  # the carve divides the training files
    assert len(test.src) == 60  # the test files are read whole: no story is carved out of them


def test_a_carve_at_another_offset_is_disjoint_from_the_first(tmp_path):
    """data.carve_offset: a second validation split of the same size, with no story of the first."""
    (tmp_path / "qa1_x_train.txt").write_text("".join(f"1 Person{i} went to the garden.\n2 Where is Person{i}?\t"
                                                      "garden\t1\n" for i in range(200)))  # every story its own
    first = babi_task(tmp_path, 0.3).examples("valid")
    second = babi_task(tmp_path, 0.3, "data.carve_offset=0.3").examples("valid")
    assert 30 < len(first.src) < 90 and 30 < len(second.src) < 90
    assert not set(first.src) & set(second.src)
    train = babi_task(tmp_path, 0.3, "data.carve_offset=0.3").examples("qa*_train.txt")
    assert len(train.src) + len(second.src) == len(babi_task(tmp_path, 0.0).examples("qa*_train.txt").src)


def test_empty_test_records_are_counted_in_the_report(tmp_path, caplog):
    rows = [{"body": f"a b c {w}", "subject": w} for w in "defgh"]
    write_jsonl(tmp_path / "train.jsonl.gz", rows)
    write_jsonl(tmp_path / "test.jsonl.gz", rows[:2] + [{"body": " ", "subject": "x"}])
    task = summarization_task(tmp_path, 'data.vocab_type="symbols"', 'data.test_split="test"', 'data.valid_split=""',
                              "data.max_input_tokens=3", 'decode.method="greedy"', "decode.max_len_b=2")
    task.prepare(tmp_path / "run", SINGLE)
    with caplog.at_level(logging.WARNING):
        result = task.test(finished_model(task, tmp_path / "run" / "model"), "cpu")
    assert result["dropped"] == {"empty": 1, "truncated": 2}  # "a b c d": 4 words + EOS > 3 tokens
    assert json.loads((tmp_path / "run" / "test_scores.json").read_text())["dropped"] == result["dropped"]
    said = warnings(caplog)
    assert sum("test: 1 of 3 examples empty" in m for m in said) == 1  # once, though the split is read twice
    assert any("test: 2 of 2 examples truncated" in m for m in said)


def test_translation_training_cuts_sources_at_max_input_tokens(tmp_path, caplog):
    cfg = load_config(None, ["train.max_updates=1", 'data.vocab_type="symbols"', "data.n_train=50", "data.n_valid=5",
                             "data.min_len=3", "data.max_len=8", "data.max_input_tokens=5"])
    task = TranslationTask(cfg)
    with caplog.at_level(logging.WARNING):
        task.prepare(tmp_path, SINGLE)
    lengths = task.train_set.src_lengths
    assert lengths.max() == 4 and task.drops.of("train")["truncated"] == sum(
        len(s.split()) > 4 for s in task.examples("train").src)  # 4 ids + the EOS collation adds
    assert any("train:" in m and "truncated (sources over 5 tokens, the start kept)" in m for m in warnings(caplog))
    assert json.loads((tmp_path / "tokenizer" / "tokenizer.json").read_text())  # prepared as usual


def test_translation_pairs_over_max_tokens_are_counted_in_training_and_validation(tmp_path, caplog):
    """A pair alone over data.max_tokens is left out of the batches: counted per split, and with the
    other splits' drops in the report beside the test split's."""
    cfg = load_config(None, ["train.max_updates=1", 'data.vocab_type="symbols"', "data.n_train=200", "data.n_valid=50",
                             "data.min_len=3", "data.max_len=12", "data.max_tokens=18"])
    task = TranslationTask(cfg)
    task.prepare(tmp_path, SINGLE)
    with caplog.at_level(logging.WARNING):
        batches, valid = task.train_data(SINGLE)(0), task.valid_data()
    in_batches = sum(len(b.src) for b in batches)
    assert task.drops.of("train")["skipped"] == len(task.train_set) - in_batches > 0
    validation = "val (validation batches)"  # not "val": a test split that is val decodes every pair
    assert task.drops.of(validation)["skipped"] == len(task.valid_set) - sum(len(b.src) for b in valid) > 0
    assert "val" not in task.drops.counts
    assert any("train:" in m and "skipped (a pair alone over data.max_tokens = 18" in m for m in warnings(caplog))
    assert task.drops.besides("test") == {split: task.drops.of(split) for split in ("train", validation)}


def test_classification_counts_cut_and_skipped_texts(tmp_path, caplog):
    lines = ["text\tlabel"] + [f"{'w ' * n}x\t{n % 2}" for n in range(1, 13)] + ["\t1"]
    for split in ("train", "test"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    cfg = load_config(None, ['task="classify"', 'model.type="encoder-only"', "model.d_model=16", "model.n_heads=2",
                             "model.n_layers=1", "model.d_ff=32", "model.max_positions=16", f'data.corpus="{tmp_path}"',
                             'data.vocab_type="symbols"', 'data.valid_split=""', 'data.test_split="test"',
                             "data.max_input_tokens=8", "data.max_tokens=6", "train.max_updates=1"])
    task = ClassifyTask(cfg)
    task.prepare(tmp_path / "run", SINGLE)
    with caplog.at_level(logging.WARNING):
        result = task.test(finished_model(task, tmp_path / "run" / "model"), "cpu")
    # 12 texts of 2..13 tokens: the 5 over 8 are cut to 8; with its [CLS] a text of 6 or more fills more
    # than a batch of 6 positions: the 8 texts of 6..13 tokens are skipped
    assert result["dropped"] == {"empty": 1, "truncated": 5, "skipped": 8}
    assert result["n_examples"] == 12 - 8  # the examples measured, not the ones the sampler skipped
    assert any("test: 8 of 12 examples skipped" in m for m in warnings(caplog))


def test_a_long_prompt_keeps_its_last_half_block_and_says_so(caplog):
    from aiayn.data.tokenizer import CharTokenizer
    from aiayn.models.decoder_only import DecoderOnly, DecoderOnlyConfig

    tokenizer = CharTokenizer.from_text("abcdefgh")
    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                          d_ff=32, max_positions=8))
    generator = Generator(model, tokenizer)
    with caplog.at_level(logging.WARNING):
        out = generator.generate("abcdefghab", max_new_tokens=3, method="greedy")
    assert out == generator.generate("ghab", max_new_tokens=3, method="greedy")  # the last half block, 4 tokens
    assert any("a prompt of 10 tokens: the first 6 dropped" in m for m in warnings(caplog))


def test_a_translation_test_splits_empty_pairs_are_counted_in_the_report(tmp_path):
    """Read through `examples` (not the cached `load`), the test split's empties were only logged."""
    for split, lines in (("train", ["a b", "b c", "c d"]), ("test", ["a b", "", "b c"])):
        (tmp_path / f"{split}.de").write_text("\n".join(lines) + "\n")
        (tmp_path / f"{split}.en").write_text("\n".join(["x y", "y z", "z x"]) + "\n")
    task = TranslationTask(load_config(None, [f'data.corpus="{tmp_path}"', 'data.vocab_type="symbols"', 'data.src_lang="de"',
                                              'data.tgt_lang="en"', 'data.valid_split=""', 'data.test_split="test"',
                                              "train.max_updates=1", 'decode.method="greedy"', "decode.max_len_b=2"]))
    task.prepare(tmp_path / "run", SINGLE)
    result = task.test(finished_model(task, tmp_path / "run" / "model"), "cpu")
    assert result["dropped"] == {"empty": 1}


def test_a_summarization_tsv_file_gives_no_test_pairs(tmp_path):
    """One file is one split: read again as the test split, the test scored the training pairs."""
    from aiayn.data.corpus import CorpusError

    (tmp_path / "pairs.tsv").write_text("".join(f"a b c {w}\t{w}\n" for w in "defgh"))
    task = summarization_task(tmp_path, 'data.format="parallel"', f'data.corpus="{tmp_path / "pairs.tsv"}"',
                              'data.vocab_type="symbols"', 'data.valid_split=""', 'data.test_split="test"')
    with pytest.raises(CorpusError, match="one TSV file holds one split, the training pairs, so it cannot also give "
                                          "data.test_split = 'test'"):
        task.prepare(tmp_path / "run", SINGLE)
