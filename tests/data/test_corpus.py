from __future__ import annotations

import gzip
import logging

import numpy as np
import pytest

from aiayn.data.corpus import (
    CorpusError, CorpusFileNotFound, PairStream, length_filter, read_lines, read_parallel, read_split, read_text_file,
    read_tsv,
)


def write(path, data: bytes | str, gz: bool = False):
    data = data.encode("utf-8") if isinstance(data, str) else data
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_pair_normalises_crlf_and_edge_whitespace(tmp_path, gz):
    sfx = ".gz" if gz else ""
    src = write(tmp_path / f"a.en{sfx}", "\ufeffHello world \r\n  two  spaces\r\nlast", gz)
    tgt = write(tmp_path / f"a.de{sfx}", "Hallo Welt\n zwei\t\nletzte\n", gz)
    c = read_parallel(src, tgt)
    assert c.src == ["Hello world", "two  spaces", "last"]
    assert c.tgt == ["Hallo Welt", "zwei", "letzte"]
    assert c.stats.n_read == 3 and c.stats.n_kept == 3


@pytest.mark.parametrize("lines", [(3, 2), (2, 3), (1, 4)])
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, lines):
    src = write(tmp_path / "a.en", "x\n" * lines[0])
    tgt = write(tmp_path / "a.de", "y\n" * lines[1])
    with pytest.raises(CorpusError, match=rf"a\.en has {lines[0]} lines, .*a\.de has {lines[1]}"):
        read_parallel(src, tgt)


@pytest.mark.parametrize("text", ["\ufeffa \r\n\n b\u2028c\r\r\nlast", "", "\n", "one\n\n", "x\x85y\n\ttab"])
def test_streamed_lines_are_the_lines_of_the_whole_file(tmp_path, text):
    path = write(tmp_path / "t.txt", text)
    whole = read_text_file(path).split("\n")
    whole = whole[:-1] if whole[-1] == "" else whole
    assert read_lines(path, strip=False) == [line.rstrip("\r") for line in whole]
    assert read_lines(path) == [line.strip() for line in whole]


def test_a_pair_stream_reads_again_at_each_pass_and_counts(tmp_path):
    src = write(tmp_path / "a.en", "a\n\nc\n")
    tgt = write(tmp_path / "a.de", "x\ny\nz\n")
    stream = PairStream((src, tgt), is_tsv=False)
    sources, targets = stream.sides()
    assert list(sources) == list(sources) == ["a", "c"] and list(targets) == ["x", "z"]
    assert stream.stats.n_read == 3 and stream.stats.n_empty == 1


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "a.en", b"ok\nfine\nbad \xff byte\n")
    tgt = write(tmp_path / "a.de", "1\n2\n3\n")
    with pytest.raises(CorpusError, match=r"a\.en:3: invalid UTF-8"):
        read_parallel(src, tgt)


def test_missing_file(tmp_path):
    tgt = write(tmp_path / "a.de", "1\n")
    with pytest.raises(FileNotFoundError, match=r"nope\.en"):
        read_parallel(tmp_path / "nope.en", tgt)
    write(tmp_path / "test.de.gz", "x\n", gz=True)
    with pytest.raises(CorpusFileNotFound, match=r"test\.fr"):
        read_split(tmp_path, "test", "de", "fr")


def test_corrupt_gzip(tmp_path):
    path = write(tmp_path / "a.en.gz", gzip.compress(b"x\n" * 100)[:-10])
    with pytest.raises(CorpusError, match=r"a\.en\.gz: cannot decompress"):
        read_lines(path)


def test_empty_side_skipped_and_counted_or_strict_error(tmp_path, caplog):
    src = write(tmp_path / "a.en", "one\n\nthree\n   \nfive\n")
    tgt = write(tmp_path / "a.de", "eins\nzwei\n\nvier\nfünf\n")
    with caplog.at_level(logging.WARNING):
        c = read_parallel(src, tgt)
    assert c.pairs == [("one", "eins"), ("five", "fünf")]
    assert (c.stats.n_read, c.stats.n_empty, c.stats.n_kept) == (5, 3, 2)
    assert "skipped 3 pairs" in caplog.text
    with pytest.raises(CorpusError, match=r"a\.en:2: empty line"):
        read_parallel(src, tgt, strict=True)


def test_tsv(tmp_path):
    path = write(tmp_path / "c.tsv", "a b\tx y\r\n c \t z \nonly\t\n")
    c = read_tsv(path)
    assert c.pairs == [("a b", "x y"), ("c", "z")]
    assert c.stats.n_empty == 1
    with pytest.raises(CorpusError, match=r"c\.tsv:3: empty line"):
        read_tsv(path, strict=True)
    bad = write(tmp_path / "d.tsv", "a\tb\nno tab here\n")
    with pytest.raises(CorpusError, match=r"d\.tsv:2: expected 2 tab-separated fields, found 1"):
        read_tsv(bad)


def test_length_filters_report_drops(tmp_path, caplog):
    src = write(tmp_path / "a.en", "a\na b c d e\na b\na\n")
    tgt = write(tmp_path / "a.de", "a\na b\na b c d e f g\na b c d\n")
    with caplog.at_level(logging.INFO):
        c = read_parallel(src, tgt).filter(max_len=5, max_ratio=3.0)
    # pair 3 too long (7 > 5); pair 4 ratio 4 > 3; pair 2 ratio 2.5 kept
    assert c.pairs == [("a", "a"), ("a b c d e", "a b")]
    assert (c.stats.n_too_long, c.stats.n_bad_ratio, c.stats.n_kept) == (1, 1, 2)
    assert "dropped 2 pairs" in caplog.text


def test_length_filter_counts_disjoint():
    keep, n_long, n_ratio = length_filter(np.array([1, 10, 0]), np.array([10, 10, 3]), max_len=9, max_ratio=2)
    assert keep.tolist() == [False, False, False] and (n_long, n_ratio) == (2, 1)


def test_multi30k_split(multi30k_dir, gz_lines):
    c = read_split(multi30k_dir, "val", "en", "de", strict=True)
    assert len(c) == 1014 and c.stats.n_empty == 0
    assert c.src == [s.strip() for s in gz_lines(multi30k_dir / "val.en.gz")]
