"""Reading parallel text: a pair of files, a TSV file, or a `{split}.{lang}` directory.

Every line is normalised the same way: CRLF/CR line ends are removed and leading and
trailing whitespace is stripped (Multi30k has stray edge spaces). A UTF-8 byte-order
mark at the start of a file is dropped. Problems raise `CorpusError` naming the file and
line (a missing file raises `CorpusFileNotFound`, which is also a FileNotFoundError).
A pair with an empty side is skipped and counted, or is an error with `strict=True`.
Nothing is returned until a whole corpus has been read, so an error leaves no partial output.

`PairStream` reads the same way a line at a time, for corpora too big to hold as text (the
tokenizer and the vocabulary read them in chunks); `read_parallel`/`read_tsv` collect it.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from aiayn.data import registry
from aiayn.io import utf8_error

log = logging.getLogger(__name__)


class CorpusError(ValueError):
    """Bad parallel input; the message names the file (and line where there is one)."""


class CorpusFileNotFound(CorpusError, FileNotFoundError):
    """A corpus file does not exist."""


@dataclass(frozen=True)
class CorpusStats:
    """What reading and filtering did. `n_kept = n_read - n_empty - n_too_long - n_bad_ratio`."""

    n_read: int = 0
    n_empty: int = 0  # pairs with an empty side, skipped
    n_too_long: int = 0  # dropped by the max-length filter
    n_bad_ratio: int = 0  # dropped by the length-ratio filter

    @property
    def n_kept(self) -> int:
        return self.n_read - self.n_empty - self.n_too_long - self.n_bad_ratio


@dataclass(frozen=True)
class ParallelCorpus:
    """Aligned source and target sentences (`src[i]` translates to `tgt[i]`)."""

    src: list[str]
    tgt: list[str]
    stats: CorpusStats
    files: tuple[Path, ...] = ()

    def __len__(self) -> int:
        return len(self.src)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.src, self.tgt))

    def filter(self, max_len: Optional[int] = None, max_ratio: Optional[float] = None,
               count: Callable[[str], int] = lambda s: len(s.split())) -> "ParallelCorpus":
        """Drop pairs by length (`count`: whitespace words by default); see `length_filter`."""
        src_lens = np.array([count(s) for s in self.src], dtype=np.int64)
        tgt_lens = np.array([count(t) for t in self.tgt], dtype=np.int64)
        keep, n_long, n_ratio = length_filter(src_lens, tgt_lens, max_len, max_ratio)
        stats = replace(self.stats, n_too_long=self.stats.n_too_long + n_long,
                        n_bad_ratio=self.stats.n_bad_ratio + n_ratio)
        idx = np.flatnonzero(keep)
        return ParallelCorpus([self.src[i] for i in idx], [self.tgt[i] for i in idx], stats, self.files)


def length_filter(src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: Optional[int],
                  max_ratio: Optional[float]) -> tuple[np.ndarray, int, int]:
    """Keep-mask and drop counts (too long, bad ratio) for the given lengths.

    A pair is too long if either side has more than `max_len` tokens; it has a bad ratio
    if max(len) / max(min(len), 1) > `max_ratio`. A pair failing both counts as too long.
    None disables a filter.
    """
    too_long = np.zeros(len(src_lens), dtype=bool)
    if max_len is not None:
        too_long = (src_lens > max_len) | (tgt_lens > max_len)
    bad_ratio = np.zeros(len(src_lens), dtype=bool)
    if max_ratio is not None:
        ratio = np.maximum(src_lens, tgt_lens) / np.maximum(np.minimum(src_lens, tgt_lens), 1)
        bad_ratio = (ratio > max_ratio) & ~too_long
    keep = ~(too_long | bad_ratio)
    n_long, n_ratio = int(too_long.sum()), int(bad_ratio.sum())
    if n_long or n_ratio:
        log.info("length filter dropped %d pairs (%d longer than %s, %d with ratio > %s)",
                 n_long + n_ratio, n_long, max_len, n_ratio, max_ratio)
    return keep, n_long, n_ratio


def read_lines(path: str | Path, strip: bool = True) -> list[str]:
    """Lines of a UTF-8 text file (`.gz` decompressed), stripped (or only CR-stripped).

    Errors name the file and line.
    """
    return list(iter_lines(path, strip))


def iter_lines(path: str | Path, strip: bool = True) -> Iterator[str]:
    """`read_lines` a line at a time: memory holds one line, not the file. Lines end at "\\n" only."""
    path = _existing(path)
    at = 0  # bytes before this line, for an error's byte offset (as `utf8_error` counts it)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise CorpusError(f"{path}:{number}: invalid UTF-8 ({e.reason} at byte {at + e.start})") from None
                at += len(raw)
                line = line.removeprefix("\ufeff") if number == 1 else line
                line = line.removesuffix("\n")
                yield line.strip() if strip else line.rstrip("\r")
    except (OSError, EOFError, zlib.error) as e:
        raise CorpusError(f"{path}: cannot decompress ({e})" if path.suffix == ".gz" else f"{path}: {e}") from None


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists() or path.is_dir():  # a FIFO or /dev/stdin is read as a file is
        raise CorpusFileNotFound(f"{path}: {'a directory, not a file' if path.is_dir() else 'file not found'}")
    return path


def read_text_file(path: str | Path, errors: str = "strict") -> str:
    """The whole of a UTF-8 text file (`.gz` decompressed, a BOM dropped). Errors name the file and line;
    `errors="replace"` turns invalid bytes into U+FFFD instead."""
    path = _existing(path)
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise CorpusError(f"{path}: cannot decompress ({e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if errors == "strict":
            raise CorpusError(utf8_error(path, data, e)) from None
        text = data.decode("utf-8", errors)
        log.warning("%s; it and every other invalid byte of the file read as U+FFFD", utf8_error(path, data, e))
    return text.removeprefix("\ufeff")


def read_parallel(src_path: str | Path, tgt_path: str | Path, strict: bool = False) -> ParallelCorpus:
    """Read two line-aligned files."""
    return PairStream((Path(src_path), Path(tgt_path)), False, strict).collect()


def read_tsv(path: str | Path, strict: bool = False) -> ParallelCorpus:
    """Read `source<TAB>target` lines; a line without exactly one tab is an error."""
    return PairStream((Path(path),), True, strict).collect()


class PairStream:
    """The non-empty pairs of a pair of line-aligned files or of one TSV file, read a line at a time.

    Iterating reads the files again from the start; afterwards `stats` counts what the last pass
    read and skipped (pairs with an empty side; an error with `strict`). Line counts that differ,
    or a TSV line without exactly one tab, are errors naming the file (and line)."""

    def __init__(self, files: Sequence[Path], is_tsv: bool, strict: bool = False):
        self.files, self.is_tsv, self.strict = tuple(Path(f) for f in files), is_tsv, strict
        self.stats = CorpusStats()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        n_read = n_empty = 0
        for n_read, (s, t) in enumerate(self._all_pairs(), start=1):
            if s and t:
                yield s, t
                continue
            if self.strict:
                raise CorpusError(f"{self.files[0] if not s else self.files[-1]}:{n_read}: empty line (strict mode)")
            n_empty += 1
        self.stats = CorpusStats(n_read=n_read, n_empty=n_empty)
        if n_empty:
            log.warning("skipped %d pairs with an empty side in %s", n_empty,
                        ", ".join(sorted({str(f) for f in self.files})))

    def sides(self) -> tuple["Side", "Side"]:
        """The sources and the targets, each re-iterable on its own (a vocabulary reads them so)."""
        return Side((self,), 0), Side((self,), 1)

    def collect(self) -> ParallelCorpus:
        src, tgt = [], []
        for s, t in self:
            src.append(s)
            tgt.append(t)
        return ParallelCorpus(src, tgt, self.stats, tuple(dict.fromkeys(self.files)))

    def _all_pairs(self) -> Iterator[tuple[str, str]]:
        if self.is_tsv:
            path = self.files[0]
            for i, line in enumerate(iter_lines(path, strip=False), start=1):
                fields = line.split("\t")
                if len(fields) != 2:
                    raise CorpusError(f"{path}:{i}: expected 2 tab-separated fields, found {len(fields)}")
                yield fields[0].strip(), fields[1].strip()
            return
        src_path, tgt_path = self.files
        src, tgt, n = iter_lines(src_path), iter_lines(tgt_path), 0
        for n, pair in enumerate(itertools.zip_longest(src, tgt), start=1):
            if None in pair:
                n_src = n - 1 + (pair[0] is not None) + sum(1 for _ in src)
                n_tgt = n - 1 + (pair[1] is not None) + sum(1 for _ in tgt)
                raise CorpusError(f"line counts differ: {src_path} has {n_src} lines, {tgt_path} has {n_tgt}")
            yield pair


@dataclass(frozen=True)
class Side:
    """One side of the pairs of some `PairStream`s, one stream after the other; re-iterable."""

    streams: tuple[PairStream, ...]
    index: int  # 0: the sources, 1: the targets

    def __iter__(self) -> Iterator[str]:
        return (pair[self.index] for stream in self.streams for pair in stream)


def split_files(directory: str | Path, split: str, langs: Sequence[str]) -> list[Path]:
    """The `{split}.{lang}` or `{split}.{lang}.gz` file of each language in `directory`."""
    directory = Path(directory)
    found = []
    for lang in langs:
        candidates = [directory / f"{split}.{lang}", directory / f"{split}.{lang}.gz"]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise CorpusFileNotFound(f"{candidates[0]}[.gz]: file not found (split {split!r}, language {lang!r})")
        found.append(path)
    return found


def read_split(directory: str | Path, split: str, src_lang: str, tgt_lang: str,
               strict: bool = False) -> ParallelCorpus:
    """Read `{split}.{src_lang}[.gz]` and `{split}.{tgt_lang}[.gz]` from `directory`."""
    src_path, tgt_path = split_files(directory, split, (src_lang, tgt_lang))
    return read_parallel(src_path, tgt_path, strict)


Source = Union[str, Path, tuple[Union[str, Path], Union[str, Path]]]


def resolve_source(source: Source, split: str = "train", langs: Optional[Sequence[str]] = None,
                   data_dir: Optional[str | Path] = None, cache_dir: Optional[str | Path] = None,
                   ) -> tuple[tuple[Path, ...], bool]:
    """The files behind `source` and whether they are one TSV file.

    `source` is one of: a registered corpus name (`registry.REGISTRY`, needs `langs`), a
    `{split}.{lang}[.gz]` directory (needs `langs`), a TSV file, or a (source, target)
    pair of files. `langs` = (source language, target language).
    """
    if isinstance(source, (tuple, list)):
        if len(source) != 2:
            raise ValueError(f"a file-pair source needs exactly 2 paths, got {len(source)}")
        return (Path(source[0]), Path(source[1])), False
    if isinstance(source, str) and source in registry.REGISTRY:
        return tuple(registry.resolve_files(source, split, _two(langs, source), data_dir, cache_dir)), False
    path = Path(source)
    if path.is_dir():
        return tuple(split_files(path, split, _two(langs, source))), False
    if path.is_file():
        return (path,), True
    raise CorpusFileNotFound(f"{source}: neither a known corpus ({', '.join(registry.REGISTRY)}) "
                             f"nor an existing file or directory (one holding {split}.LANG[.gz] for each of "
                             f"{'/'.join(langs or ['its two languages'])})")


def read_corpus(source: Source, split: str = "train", langs: Optional[Sequence[str]] = None,
                data_dir: Optional[str | Path] = None, cache_dir: Optional[str | Path] = None,
                strict: bool = False) -> ParallelCorpus:
    """Raw text of any `source` accepted by `resolve_source` (e.g. to train a vocabulary)."""
    files, is_tsv = resolve_source(source, split, langs, data_dir, cache_dir)
    return read_files(files, is_tsv, strict)


def read_files(files: Sequence[Path], is_tsv: bool, strict: bool = False) -> ParallelCorpus:
    return PairStream(files, is_tsv, strict).collect()


def stream_corpus(source: Source, split: str = "train", langs: Optional[Sequence[str]] = None,
                  data_dir: Optional[str | Path] = None, cache_dir: Optional[str | Path] = None,
                  strict: bool = False) -> PairStream:
    """`read_corpus` a pair at a time (a corpus bigger than memory, e.g. to train a vocabulary on)."""
    return PairStream(*resolve_source(source, split, langs, data_dir, cache_dir), strict)


def _two(langs: Optional[Sequence[str]], source) -> tuple[str, str]:
    if langs is None or len(langs) != 2:
        raise ValueError(f"source {source!r} needs langs=(source language, target language), got {langs!r}")
    return langs[0], langs[1]
