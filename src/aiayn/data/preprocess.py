"""Tokenized parallel data as flat numpy arrays, with an on-disk cache.

A `ParallelDataset` stores each side as one flat int32 id array plus offsets
(example i is `ids[offsets[i]:offsets[i + 1]]`), which is compact and loads in
milliseconds. `tokenize_files` caches the arrays in `{cache_dir}/preprocessed/{key}.npz`,
where the key hashes the *contents* of the data files, the tokenizers' serialized models,
the reading options and `CACHE_VERSION`; a second run with the same inputs loads the
arrays instead of tokenizing, and logs that it did. Length filters are applied after the
cache, so changing them never re-tokenizes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import zipfile
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from aiayn.data.batching import Batch, TokenBucketSampler, collate, keep_within
from aiayn.data.corpus import (
    CorpusStats, ParallelCorpus, Source, length_filter, read_files, resolve_source,
)
from aiayn.data.registry import default_cache_dir, sha256_file
from aiayn.data.tokenizer import TokenizerPair
from aiayn.io import atomic_write

log = logging.getLogger(__name__)

CACHE_VERSION = 1
_STATS = ("n_read", "n_empty", "n_too_long", "n_bad_ratio")


@dataclass(frozen=True, eq=False)
class ParallelDataset:
    """Token ids of aligned pairs. `dataset[i] -> (src_ids, tgt_ids)` (int32 arrays, no BOS/EOS)."""

    src_ids: np.ndarray  # (total source tokens,) int32
    src_offsets: np.ndarray  # (N + 1,) int64
    tgt_ids: np.ndarray  # (total target tokens,) int32
    tgt_offsets: np.ndarray  # (N + 1,) int64
    stats: CorpusStats = CorpusStats()
    from_cache: bool = False  # True when loaded from the preprocessing cache

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"example {i} of {len(self)}")
        i %= len(self)  # -1 is the last, as in a list
        return (self.src_ids[self.src_offsets[i]:self.src_offsets[i + 1]],
                self.tgt_ids[self.tgt_offsets[i]:self.tgt_offsets[i + 1]])

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    @classmethod
    def from_corpus(cls, corpus: ParallelCorpus | Sequence[tuple[str, str]],
                    tokenizers: TokenizerPair) -> "ParallelDataset":
        """Tokenize text pairs (no cache), e.g. `synthetic_pairs(...)` or a `ParallelCorpus`."""
        if isinstance(corpus, ParallelCorpus):
            src, tgt, stats = corpus.src, corpus.tgt, corpus.stats
        else:
            src, tgt = [p[0] for p in corpus], [p[1] for p in corpus]
            stats = CorpusStats(n_read=len(src))
        return cls.from_ids(tokenizers.src.encode_batch(src), tokenizers.tgt.encode_batch(tgt), stats)

    @classmethod
    def from_ids(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]],
                 stats: Optional[CorpusStats] = None) -> "ParallelDataset":
        """Already tokenized pairs (lists of ids, no BOS/EOS)."""
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} sources but {len(tgt)} targets")
        src_ids, src_off = _flatten(src)
        tgt_ids, tgt_off = _flatten(tgt)
        return cls(src_ids, src_off, tgt_ids, tgt_off, stats or CorpusStats(n_read=len(src)))

    @classmethod
    def concat(cls, parts: Sequence["ParallelDataset"]) -> "ParallelDataset":
        """One dataset of `parts`' examples, in order; their reading counts summed."""
        if len(parts) == 1:
            return parts[0]

        def join(ids: str, offsets: str) -> tuple[np.ndarray, np.ndarray]:
            starts = np.cumsum([0] + [len(getattr(p, ids)) for p in parts[:-1]])
            tails = [getattr(p, offsets)[1:] + start for p, start in zip(parts, starts)]
            return np.concatenate([getattr(p, ids) for p in parts]), np.concatenate([np.zeros(1, np.int64), *tails])

        stats = CorpusStats(**{k: sum(getattr(p.stats, k) for p in parts) for k in _STATS})
        return cls(*join("src_ids", "src_offsets"), *join("tgt_ids", "tgt_offsets"), stats)

    def subset(self, indices: np.ndarray) -> "ParallelDataset":
        """The examples at `indices` (int array) or where `indices` is True (bool mask), in order."""
        idx = np.flatnonzero(indices) if np.asarray(indices).dtype == bool else np.asarray(indices, dtype=np.int64)
        src = _take(self.src_ids, self.src_offsets, idx)
        tgt = _take(self.tgt_ids, self.tgt_offsets, idx)
        return replace(self, src_ids=src[0], src_offsets=src[1], tgt_ids=tgt[0], tgt_offsets=tgt[1])

    def filter(self, max_len: Optional[int] = None, max_ratio: Optional[float] = None) -> "ParallelDataset":
        """Drop pairs longer than `max_len` subword tokens or with length ratio > `max_ratio`."""
        if max_len is None and max_ratio is None:
            return self
        keep, n_long, n_ratio = length_filter(self.src_lengths, self.tgt_lengths, max_len, max_ratio)
        stats = replace(self.stats, n_too_long=self.stats.n_too_long + n_long,
                        n_bad_ratio=self.stats.n_bad_ratio + n_ratio)
        return replace(self.subset(keep), stats=stats)

    def cut_sources(self, room: int, keep: str) -> tuple["ParallelDataset", int]:
        """(this dataset with every source cut to at most `room` tokens at its `keep` end, how many were cut)."""
        n_cut = int((self.src_lengths > room).sum())
        if not n_cut:
            return self, 0
        src = [keep_within(self[i][0], room, keep) for i in range(len(self))]
        tgt = [self[i][1] for i in range(len(self))]
        return replace(ParallelDataset.from_ids(src, tgt, self.stats), from_cache=self.from_cache), n_cut

    def sampler(self, max_tokens: int, seed: int = 0, shuffle: bool = True, rank: int = 0,
                world_size: int = 1, skip_overlong: bool = False, sort_by_length: bool = True) -> TokenBucketSampler:
        """A token-bucket sampler whose budget bounds `src.numel() + tgt_in.numel()` of each batch."""
        return TokenBucketSampler(self.src_lengths + 1, self.tgt_lengths + 1, max_tokens, seed=seed, shuffle=shuffle,
                                  rank=rank, world_size=world_size, skip_overlong=skip_overlong,
                                  sort_by_length=sort_by_length)

    def collate(self, indices: Sequence[int]) -> Batch:
        return collate([self[i] for i in indices])

    def save(self, path: str | Path) -> None:
        """Write one `.npz` atomically (no pickle)."""
        arrays = dict(src_ids=self.src_ids, src_offsets=self.src_offsets, tgt_ids=self.tgt_ids,
                      tgt_offsets=self.tgt_offsets, version=np.array(CACHE_VERSION),
                      stats=np.array([getattr(self.stats, k) for k in _STATS], dtype=np.int64))
        with atomic_write(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "ParallelDataset":
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["version"]) != CACHE_VERSION:
                    raise ValueError(f"{path}: cache version {int(z['version'])}, expected {CACHE_VERSION}")
                stats = CorpusStats(**dict(zip(_STATS, z["stats"].tolist())))
                ds = cls(z["src_ids"], z["src_offsets"], z["tgt_ids"], z["tgt_offsets"], stats, from_cache=True)
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: unreadable preprocessed data ({e})") from None
        if ds.src_offsets[-1] != len(ds.src_ids) or ds.tgt_offsets[-1] != len(ds.tgt_ids) \
                or len(ds.src_offsets) != len(ds.tgt_offsets):
            raise ValueError(f"{path}: inconsistent preprocessed arrays")
        return ds


def cache_key(files: Sequence[Path], is_tsv: bool, strict: bool, tokenizers: TokenizerPair) -> str:
    """Hash of everything the tokenized arrays depend on."""
    parts = {"version": CACHE_VERSION, "files": [sha256_file(f) for f in files], "tsv": is_tsv,
             "strict": strict, "src": tokenizers.src.fingerprint(), "tgt": tokenizers.tgt.fingerprint()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def tokenize_files(files: Sequence[Path], is_tsv: bool, tokenizers: TokenizerPair,
                   cache_dir: Optional[str | Path] = None, strict: bool = False) -> ParallelDataset:
    """Read and tokenize `files` (a pair, or one TSV), or load the result from the cache."""
    stamps = [_stamp(f) for f in files]  # before the key hashes the bytes: a change after this is seen below
    path = Path(cache_dir or default_cache_dir()) / "preprocessed" / f"{cache_key(files, is_tsv, strict, tokenizers)}.npz"
    if path.is_file():
        try:
            ds = ParallelDataset.load(path)
            log.info("preprocessing cache hit: skipped tokenization of %d pairs from %s (%s)",
                     len(ds), ", ".join(map(str, dict.fromkeys(files))), path)
            return ds
        except ValueError as e:
            log.warning("ignoring bad cache entry: %s; tokenizing again", e)
    ds = ParallelDataset.from_corpus(read_files(files, is_tsv, strict), tokenizers)
    if [_stamp(f) for f in files] != stamps:  # the key hashed other bytes than these pairs came from
        log.warning("%s changed while being read: its pairs are used but not cached", ", ".join(map(str, files)))
        return ds
    ds.save(path)
    log.info("tokenized %d pairs from %s; cached in %s", len(ds), ", ".join(map(str, dict.fromkeys(files))), path)
    return ds


def _stamp(path: Path) -> tuple[int, int]:
    st = Path(path).stat()
    return st.st_mtime_ns, st.st_size


def load_parallel(
    source: Source,
    tokenizers: TokenizerPair,
    *,
    split: str = "train",
    langs: Optional[Sequence[str]] = None,
    data_dir: Optional[str | Path] = None,
    cache_dir: Optional[str | Path] = None,
    max_len: Optional[int] = None,
    max_ratio: Optional[float] = None,
    strict: bool = False,
) -> ParallelDataset:
    """Tokenized, cached, length-filtered parallel data; see `aiayn.data` for the arguments."""
    files, is_tsv = resolve_source(source, split, langs, data_dir, cache_dir)
    return tokenize_files(files, is_tsv, tokenizers, cache_dir, strict).filter(max_len, max_ratio)


def _flatten(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


def _take(ids: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.diff(offsets)[idx]
    new_offsets = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    # (total,) position of every kept token: start of its example + rank within it
    starts = np.repeat(offsets[idx] - new_offsets[:-1], lengths)
    return ids[starts + np.arange(new_offsets[-1])], new_offsets
