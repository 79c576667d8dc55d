from __future__ import annotations

import logging

import numpy as np
import pytest

from aiayn.data import TokenizerPair, load_parallel, padding_efficiency
from aiayn.data.batching import keep_within
from aiayn.data.corpus import CorpusError
from aiayn.data.preprocess import ParallelDataset
from aiayn.data.synthetic import symbols, synthetic_pairs
from aiayn.data.tokenizer import SymbolTokenizer


@pytest.fixture
def sym_pair():
    return TokenizerPair.shared(SymbolTokenizer(symbols(10)))


@pytest.fixture
def corpus_files(tmp_path):
    pairs = synthetic_pairs("reverse", 50, seed=0)
    src, tgt = tmp_path / "data" / "c.src", tmp_path / "data" / "c.tgt"
    src.parent.mkdir()
    src.write_text("".join(s + "\n" for s, _ in pairs))
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    return src, tgt, pairs


def _cache_files(cache):
    return sorted(p.name for p in (cache / "preprocessed").glob("*")) if (cache / "preprocessed").exists() else []


def test_dataset_matches_tokenizer(corpus_files, sym_pair, tmp_path):
    src, tgt, pairs = corpus_files
    ds = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    assert len(ds) == 50 and not ds.from_cache
    for i, (s, t) in enumerate(pairs):
        assert ds[i][0].tolist() == sym_pair.src.encode(s)
        assert ds[i][1].tolist() == sym_pair.tgt.encode(t)
    assert ds.src_lengths.tolist() == [len(s.split()) for s, _ in pairs]


def test_second_run_skips_tokenization_and_says_so(corpus_files, sym_pair, tmp_path, caplog, monkeypatch):
    src, tgt, _ = corpus_files
    first = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    assert len(_cache_files(tmp_path / "cache")) == 1

    def boom(*a, **k):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(SymbolTokenizer, "encode_batch", boom)
    with caplog.at_level(logging.INFO):
        second = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    assert second.from_cache and "skipped tokenization of 50 pairs" in caplog.text
    for a, b in [(first.src_ids, second.src_ids), (first.tgt_spans, second.tgt_spans)]:
        np.testing.assert_array_equal(a, b)
    # different content or a different tokenizer -> a different key
    monkeypatch.undo()
    tgt.write_text(tgt.read_text().replace("a", "b", 1))
    assert not load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache").from_cache
    other = TokenizerPair.shared(SymbolTokenizer(symbols(11)))
    assert not load_parallel((src, tgt), other, cache_dir=tmp_path / "cache").from_cache
    assert len(_cache_files(tmp_path / "cache")) == 3


@pytest.mark.parametrize("damage", ["truncated ids", "no meta", "other version"])
def test_corrupt_cache_entry_is_rebuilt(corpus_files, sym_pair, tmp_path, caplog, damage):
    src, tgt, _ = corpus_files
    load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    (entry,) = (tmp_path / "cache" / "preprocessed").iterdir()
    if damage == "truncated ids":
        (entry / "tgt_ids.npy").write_bytes((entry / "tgt_ids.npy").read_bytes()[:100])
    elif damage == "no meta":
        (entry / "meta.json").unlink()
    else:
        (entry / "meta.json").write_text('{"version": 1}')
    with caplog.at_level(logging.WARNING):
        ds = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    assert not ds.from_cache and len(ds) == 50 and "ignoring bad cache entry" in caplog.text
    assert ParallelDataset.load(entry).from_cache and _cache_files(tmp_path / "cache") == [entry.name]


def test_cached_arrays_are_memory_mapped_and_subsets_share_them(corpus_files, sym_pair, tmp_path):
    src, tgt, pairs = corpus_files
    load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    ds = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache", max_len=3)
    assert ds.from_cache and isinstance(ds.src_ids, np.memmap) and isinstance(ds.tgt_ids, np.memmap)
    kept = [(s, t) for s, t in pairs if len(s.split()) <= 3 and len(t.split()) <= 3]  # spans over the mapped ids
    assert 0 < len(ds) == len(kept) < 50
    assert [(a.tolist(), b.tolist()) for a, b in (ds[i] for i in range(len(ds)))] == \
           [(sym_pair.src.encode(s), sym_pair.tgt.encode(t)) for s, t in kept]


def test_cut_sources_is_keep_within_on_every_source(sym_pair):
    pairs = synthetic_pairs("copy", 20, seed=3, min_len=1, max_len=9)
    ds = ParallelDataset.from_corpus(pairs, sym_pair)
    for keep in ("start", "end"):
        cut, n_cut = ds.cut_sources(4, keep)
        assert n_cut == sum(len(s.split()) > 4 for s, _ in pairs)
        assert [cut[i][0].tolist() for i in range(20)] == [keep_within(ds[i][0].tolist(), 4, keep) for i in range(20)]
        assert [cut[i][1].tolist() for i in range(20)] == [ds[i][1].tolist() for i in range(20)]


def test_bad_input_leaves_no_cache_entry(corpus_files, sym_pair, tmp_path):
    src, tgt, _ = corpus_files
    tgt.write_text("a b\n")
    with pytest.raises(CorpusError, match="line counts differ"):
        load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="neither a known corpus"):
        load_parallel(tmp_path / "nothing.tsv", sym_pair, cache_dir=tmp_path / "cache")
    assert _cache_files(tmp_path / "cache") == []


def test_subset_and_filter_against_brute_force(sym_pair):
    pairs = synthetic_pairs("copy", 40, seed=1, min_len=1, max_len=9)
    pairs[3] = ("a", "a b c d e")  # ratio 5
    ds = ParallelDataset.from_corpus(pairs, sym_pair)
    idx = np.array([5, 0, 39, 7])
    sub = ds.subset(idx)
    assert [(a.tolist(), b.tolist()) for a, b in (sub[i] for i in range(4))] == \
           [(ds[i][0].tolist(), ds[i][1].tolist()) for i in idx]
    f = ds.filter(max_len=7, max_ratio=3)
    expect = [i for i, (s, t) in enumerate(pairs)
              if len(s.split()) <= 7 and len(t.split()) <= 7 and i != 3]
    assert [f[j][0].tolist() for j in range(len(f))] == [ds[i][0].tolist() for i in expect]
    assert f.stats.n_too_long + f.stats.n_bad_ratio == 40 - len(expect) and f.stats.n_bad_ratio == 1


def test_tsv_source(tmp_path, sym_pair):
    path = tmp_path / "c.tsv"
    path.write_text("a b\tb a\nc\t\n")
    ds = load_parallel(path, sym_pair, cache_dir=tmp_path / "cache")
    assert len(ds) == 1 and ds.stats.n_empty == 1 and ds[0][1].tolist() == sym_pair.tgt.encode("b a")


def test_multi30k_bucketed_padding_efficiency(multi30k_dir, multi30k_bpe, tmp_path):
    tok = TokenizerPair.shared(multi30k_bpe)
    ds = load_parallel("multi30k", tok, split="train", langs=("en", "de"), data_dir=multi30k_dir,
                       cache_dir=tmp_path)
    assert len(ds) == 29000
    sampler = ds.sampler(max_tokens=4096, seed=0)
    batches = sampler.batches(0)
    assert padding_efficiency(batches, ds.src_lengths, ds.tgt_lengths + 1) >= 0.90
    for indices in batches[:50]:
        b = ds.collate(indices)
        assert b.src.numel() + b.tgt_in.numel() <= 4096


def test_concat_joins_examples_in_order_and_sums_the_counts(sym_pair):
    pairs = synthetic_pairs("copy", 30, seed=2, min_len=1, max_len=9)
    ds = ParallelDataset.from_corpus(pairs, sym_pair).filter(max_len=7)
    parts = [ds.subset(np.arange(0, 5)), ds.subset(np.arange(5, 5)), ds.subset(np.arange(5, len(ds)))]
    joined = ParallelDataset.concat(parts)
    assert len(joined) == len(ds)
    assert [(joined[i][0].tolist(), joined[i][1].tolist()) for i in range(len(ds))] == \
           [(ds[i][0].tolist(), ds[i][1].tolist()) for i in range(len(ds))]
    assert joined.stats.n_too_long == 3 * ds.stats.n_too_long  # each part kept the counts of its source


def test_a_file_changed_while_read_is_used_but_not_cached(corpus_files, sym_pair, tmp_path, monkeypatch, caplog):
    """The key hashes the files before they are read: pairs read after a change would be cached under the
    old bytes' key, and a later run on those bytes would load them."""
    import os

    from aiayn.data import preprocess

    src, tgt, _ = corpus_files
    encode = preprocess._encode_into

    def encode_then_touch(out, pairs, tokenizers):
        encode(out, pairs, tokenizers)
        os.utime(src, ns=(0, 1))  # a writer comes by

    monkeypatch.setattr(preprocess, "_encode_into", encode_then_touch)
    with caplog.at_level(logging.WARNING):
        ds = load_parallel((src, tgt), sym_pair, cache_dir=tmp_path / "cache")
    assert len(ds) == 50 and "changed while being read: its pairs are used but not cached" in caplog.text
    assert ds[49][1].tolist() == sym_pair.tgt.encode(tgt.read_text().splitlines()[49])
    assert _cache_files(tmp_path / "cache") == []


def test_an_index_counts_from_the_end_as_a_list_does(sym_pair):
    ds = ParallelDataset.from_corpus([("a", "b"), ("a b", "c d e")], sym_pair)
    assert [x.tolist() for x in ds[-1]] == [x.tolist() for x in ds[1]] and len(ds[-1][1]) == 3
    for bad in (2, -3):
        with pytest.raises(IndexError):
            ds[bad]


def test_saving_where_an_entry_is_keeps_a_good_one_and_replaces_a_bad_one(sym_pair, tmp_path):
    """Ranks or runs that tokenize the same corpus at once: the first finished entry stays for its readers."""
    first = ParallelDataset.from_corpus([("a", "b")], sym_pair)
    first.save(tmp_path / "entry")
    ParallelDataset.from_corpus([("a b", "c")], sym_pair).save(tmp_path / "entry")
    assert ParallelDataset.load(tmp_path / "entry")[0][0].tolist() == first[0][0].tolist()
    (tmp_path / "entry" / "meta.json").write_text("{}")  # now a bad entry
    ParallelDataset.from_corpus([("a b", "c")], sym_pair).save(tmp_path / "entry")
    assert len(ParallelDataset.load(tmp_path / "entry")[0][0]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]  # no temporary directory left
