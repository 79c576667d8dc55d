"""Reading parallel text: a pair of files, a TSV file, or a `{split}.{lang}` directory.

Every line is normalised the same way: CRLF/CR line ends are removed and leading and
trailing whitespace is stripped (Multi30k has stray edge spaces). A UTF-8 byte-order
mark at the start of a file is dropped. Problems raise `CorpusError` naming the file and
line (a missing file raises `CorpusFileNotFound`, which is also a FileNotFoundError).
A pair with an empty side is skipped and counted, or is an error with `strict=True`.
Nothing is returned until a whole corpus has been read, so an error leaves no partial output.
"""

from __future__ import annotations

import gzip
import logging
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np

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
    lines = read_text_file(path).split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return [line.strip() if strip else line.rstrip("\r") for line in lines]


def read_text_file(path: str | Path, errors: str = "strict") -> str:
    """The whole of a UTF-8 text file (`.gz` decompressed, a BOM dropped). Errors name the file and line;
    `errors="replace"` turns invalid bytes into U+FFFD instead."""
    path = Path(path)
    if not path.exists() or path.is_dir():  # a FIFO or /dev/stdin is read as a file is
        raise CorpusFileNotFound(f"{path}: {'a directory, not a file' if path.is_dir() else 'file not found'}")
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
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    return _drop_empty(src, tgt, [Path(src_path), Path(tgt_path)], strict)


def read_tsv(path: str | Path, strict: bool = False) -> ParallelCorpus:
    """Read `source<TAB>target` lines; a line without exactly one tab is an error."""
    src, tgt = [], []
    for i, line in enumerate(read_lines(path, strip=False), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{i}: expected 2 tab-separated fields, found {len(fields)}")
        src.append(fields[0].strip())
        tgt.append(fields[1].strip())
    return _drop_empty(src, tgt, [Path(path), Path(path)], strict)


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


def _drop_empty(src: list[str], tgt: list[str], files: list[Path], strict: bool) -> ParallelCorpus:
    keep_src, keep_tgt, n_empty = [], [], 0
    for i, (s, t) in enumerate(zip(src, tgt), start=1):
        if s and t:
            keep_src.append(s)
            keep_tgt.append(t)
            continue
        if strict:
            side = files[0] if not s else files[1]
            raise CorpusError(f"{side}:{i}: empty line (strict mode)")
        n_empty += 1
    if n_empty:
        log.warning("skipped %d pairs with an empty side in %s", n_empty, ", ".join(sorted({str(f) for f in files})))
    return ParallelCorpus(keep_src, keep_tgt, CorpusStats(n_read=len(src), n_empty=n_empty), tuple(dict.fromkeys(files)))


Source = Union[str, Path, tuple[Union[str, Path], Union[str, Path]]]


def resolve_source(source: Source, split: str = "train", langs: Optional[Sequence[str]] = None,
                   data_dir: Optional[str | Path] = None, cache_dir: Optional[str | Path] = None,
                   ) -> tuple[tuple[Path, ...], bool]:
    """The files behind `source` and whether they are one TSV file.

    `source` is one of: a registered corpus name (`registry.REGISTRY`, needs `langs`), a
    `{split}.{lang}[.gz]` directory (needs `langs`), a TSV file, or a (source, target)
    pair of files. `langs` = (source language, target language).
    """
    from aiayn.data import registry

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
    return read_tsv(files[0], strict) if is_tsv else read_parallel(files[0], files[1], strict)


def _two(langs: Optional[Sequence[str]], source) -> tuple[str, str]:
    if langs is None or len(langs) != 2:
        raise ValueError(f"source {source!r} needs langs=(source language, target language), got {langs!r}")
    return langs[0], langs[1]
