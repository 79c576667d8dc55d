from __future__ import annotations

import json
import random

import pytest

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.tokenizer import (
    MANIFEST, SentencePieceTokenizer, SymbolTokenizer, TokenizerError, TokenizerPair,
    load_tokenizers, save_tokenizers,
)

# Hand-made text with features that break naive detokenizers: runs of spaces, edge spaces,
# tabs, characters never seen in training (byte fallback), combining marks and NFKC-unstable
# forms (identity normalization must keep them).
TRICKY = ["  two  leading", "trailing   ", "tab\there", "emoji 🙂 and 日本語", "ﬁ ligature Ｆｕｌｌ", "e\u0301", "", " "]


def _small_corpus() -> list[str]:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzäöüß") for _ in range(rng.randint(2, 7)))
             for _ in range(300)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(2000)]


@pytest.fixture(scope="module")
def small_spm() -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(_small_corpus(), vocab_size=400, model_type="unigram")


def test_special_ids_are_fixed(small_spm):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert small_spm.pieces([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    sym = SymbolTokenizer(["a", "b"])
    assert sym.pieces([0, 1, 2, 3, 4, 5]) == ["<pad>", "<s>", "</s>", "<unk>", "a", "b"]


def test_encode_adds_no_specials_and_decode_skips_them(small_spm):
    ids = small_spm.encode("the cat sat")
    assert ids and not set(ids) & {PAD_ID, BOS_ID, EOS_ID, UNK_ID}
    assert small_spm.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "the cat sat"


@pytest.mark.parametrize("text", TRICKY)
def test_sentencepiece_round_trips_unseen_text(small_spm, text):
    ids = small_spm.encode(text)
    assert UNK_ID not in ids  # byte fallback: unseen characters survive as bytes
    assert small_spm.decode(ids) == text


def test_decode_rejects_out_of_range_ids(small_spm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        small_spm.decode([small_spm.vocab_size])


def test_bad_model_type():
    with pytest.raises(ValueError, match="model_type"):
        SentencePieceTokenizer.train(["a b"], vocab_size=400, model_type="word")


def test_train_is_deterministic():
    a = SentencePieceTokenizer.train(_small_corpus(), vocab_size=400, model_type="bpe")
    b = SentencePieceTokenizer.train(_small_corpus(), vocab_size=400, model_type="bpe")
    assert a.fingerprint() == b.fingerprint()


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_the_vocabulary_does_not_depend_on_the_machines_cores(monkeypatch, model_type):
    """The unigram trainer's pieces, and any model's saved thread count, follow its threads: a fixed
    count, whatever the machine has (read when training, not when the module was imported)."""
    import os

    import sentencepiece as spm

    from aiayn.data.tokenizer import TRAIN_THREADS

    trained, threads, train = [], [], spm.SentencePieceTrainer.train
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", lambda **kw: threads.append(kw["num_threads"]) or train(**kw))
    for cores in (1, 4):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        trained.append(SentencePieceTokenizer.train(_small_corpus(), vocab_size=400, model_type=model_type).serialize())
    assert trained[0] == trained[1] and threads == [TRAIN_THREADS] * 2


def test_training_files_are_read_as_corpora_are(tmp_path):
    """A BOM is dropped (it is no piece), and a .gz file is decompressed."""
    import gzip

    lines = _small_corpus()
    (tmp_path / "bom.txt").write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "lines.txt.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    plain = SentencePieceTokenizer.train(lines, vocab_size=400)
    for name in ("bom.txt", "lines.txt.gz"):
        assert SentencePieceTokenizer.train(files=[tmp_path / name], vocab_size=400).serialize() == plain.serialize()


def test_multi30k_val_round_trip_exact(multi30k_dir, multi30k_bpe, gz_lines):
    for lang in ("en", "de"):
        lines = [s.strip() for s in gz_lines(multi30k_dir / f"val.{lang}.gz")]
        assert len(lines) == 1014
        ids = multi30k_bpe.encode_batch(lines)
        assert [multi30k_bpe.decode(x) for x in ids] == lines
        assert all(UNK_ID not in x for x in ids)


def test_symbol_tokenizer():
    tok = SymbolTokenizer(["a", "b", "c"])
    assert tok.vocab_size == 7
    assert tok.encode("a c  b\tz") == [4, 6, 5, UNK_ID]
    assert tok.decode([BOS_ID, 4, 6, 5, UNK_ID, EOS_ID, PAD_ID]) == "a c b <unk>"
    for bad in (["a", "a"], ["a b"], [""], ["<s>"]):
        with pytest.raises(TokenizerError):
            SymbolTokenizer(bad)


@pytest.mark.parametrize("joint", [True, False])
def test_save_load_round_trip(tmp_path, small_spm, joint):
    pair = TokenizerPair.shared(small_spm) if joint else TokenizerPair(small_spm, SymbolTokenizer(["x", "y"]))
    save_tokenizers(pair, tmp_path)
    loaded = load_tokenizers(tmp_path)
    assert loaded.joint is joint
    assert loaded.src.fingerprint() == pair.src.fingerprint()
    assert loaded.tgt.fingerprint() == pair.tgt.fingerprint()
    assert loaded.src.encode("the cat") == small_spm.encode("the cat")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_load_errors_name_the_file(tmp_path, small_spm):
    with pytest.raises(FileNotFoundError, match=MANIFEST):
        load_tokenizers(tmp_path)
    save_tokenizers(TokenizerPair.shared(small_spm), tmp_path)
    model = tmp_path / "tokenizer.model"
    model.write_bytes(b"not a protobuf at all")
    with pytest.raises(TokenizerError, match="tokenizer.model"):
        load_tokenizers(tmp_path)
    model.unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.model"):
        load_tokenizers(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(TokenizerError, match=MANIFEST):
        load_tokenizers(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"version": 1, "joint": True, "src": {}}))
    with pytest.raises(TokenizerError, match="corrupt"):
        load_tokenizers(tmp_path)


def test_foreign_sentencepiece_specials_rejected(tmp_path):
    import io

    import sentencepiece as spm

    proto = io.BytesIO()  # sentencepiece defaults: unk=0, bos=1, eos=2, no pad
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_small_corpus()), model_writer=proto,
                                   vocab_size=100, minloglevel=2)
    with pytest.raises(TokenizerError, match="special ids"):
        SentencePieceTokenizer(proto.getvalue())


@pytest.fixture(scope="module")
def small_bpe() -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(_small_corpus(), vocab_size=400, model_type="bpe")


def test_bpe_dropout_is_seeded_round_trips_and_splits_more(small_bpe):
    texts = _small_corpus()[:300] + TRICKY
    drawn = small_bpe.encode_dropout(texts, 0.3, seed=5)
    small_bpe.encode_batch(texts)  # threads in between do not move the draw
    assert small_bpe.encode_dropout(texts, 0.3, seed=5) == drawn  # a resumed epoch is segmented as before
    assert small_bpe.encode_dropout(texts, 0.3, seed=6) != drawn
    assert [small_bpe.decode(ids) for ids in drawn] == texts  # another segmentation of the same text
    fixed = small_bpe.encode_batch(texts)
    assert sum(map(len, drawn)) > 1.05 * sum(map(len, fixed))  # skipped merges leave smaller pieces
    assert small_bpe.encode_dropout(texts, 0.0, seed=5) == fixed  # p = 0: every merge applies
    big = small_bpe.encode_dropout(texts, 0.3, seed=2**40 + 5)  # any int seed (sentencepiece takes 32 bits)
    assert big == small_bpe.encode_dropout(texts, 0.3, seed=2**40 + 5)


def test_bpe_dropout_needs_a_sentencepiece_vocabulary():
    with pytest.raises(ValueError, match="sentencepiece BPE vocabulary"):
        SymbolTokenizer(["a", "b"]).encode_dropout(["a b"], 0.1, seed=0)


@pytest.mark.parametrize("symbols", ['5', '"abc"', '{"a": 1}'])
def test_a_symbol_vocabulary_that_is_not_a_list_names_its_file(symbols):
    """A string would otherwise pass as its characters, a number as a TypeError traceback."""
    with pytest.raises(TokenizerError, match=r"vocab\.symbols\.json: not a symbol vocabulary"):
        SymbolTokenizer.from_bytes(f'{{"symbols": {symbols}}}'.encode(), source="vocab.symbols.json")


def test_a_data_tokenizer_that_is_not_there_says_which_setting_and_what_to_do(tmp_path):
    """sst2-classify.toml reads the vocabulary of sst2-mlm.toml's run: without that run, say so."""
    from types import SimpleNamespace

    from aiayn.tasks.base import run_tokenizers
    from aiayn.distributed import SINGLE

    with pytest.raises(FileNotFoundError, match=r"data\.tokenizer = .*nope: no such directory; train the run"):
        run_tokenizers(SimpleNamespace(tokenizer=str(tmp_path / "nope")), tmp_path, SINGLE, True, lambda: None)


def test_lines_over_sentencepieces_limit_are_counted_not_silently_skipped(caplog):
    """sentencepiece leaves out of training any sentence over max_sentence_length (4192 bytes) and says
    nothing: the count is logged (the vocabulary stays as sentencepiece makes it)."""
    import logging

    long = " ".join(["zebrafish quokka"] * 300)  # 5,099 bytes
    with caplog.at_level(logging.WARNING):
        SentencePieceTokenizer.train(_small_corpus() + [long, long], vocab_size=300, model_type="bpe")
    assert "2 training lines over 4192 bytes (sentencepiece's max_sentence_length) did not train" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SentencePieceTokenizer.train(_small_corpus() + [long[:4192]], vocab_size=300, model_type="bpe")
    assert "did not train" not in caplog.text
