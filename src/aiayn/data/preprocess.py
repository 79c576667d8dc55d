"""Tokenized parallel data as flat numpy arrays, with an on-disk cache that is memory-mapped.

A `ParallelDataset` stores each side as one flat int32 id array plus a span per example
(example i's source is `src_ids[src_spans[i, 0]:src_spans[i, 1]]`). Subsets, length filters and
cut sources make new spans over the same ids, never a copy of them.

`tokenize_files` reads the corpus a chunk of `CHUNK_PAIRS` pairs at a time, encodes each chunk
(sentencepiece on every core) and streams its ids to disk, so its memory holds one chunk, not the
corpus (WMT 2014's 4.5M pairs are about 1 GB of ids). The result is cached in
`{cache_dir}/preprocessed/{key}/` as `.npy` files that later runs memory-map (`numpy.load(mmap_mode="r")`):
pages are read as batches touch them. The key hashes the *contents* of the data files, the tokenizers'
serialized models, the reading options and `CACHE_VERSION`; a second run with the same inputs loads the
arrays instead of tokenizing, and logs that it did. Length filters are applied after the cache, so
changing them never re-tokenizes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Iterable, Optional, Sequence

import numpy as np

from aiayn.data.batching import Batch, TokenBucketSampler, collate
from aiayn.data.corpus import CorpusStats, PairStream, ParallelCorpus, Source, length_filter, resolve_source
from aiayn.data.registry import default_cache_dir, sha256_file
from aiayn.data.tokenizer import TokenizerPair

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 2: a directory of memory-mappable .npy files (1 was one .npz, loaded whole)
CHUNK_PAIRS = 100_000  # pairs read and encoded at a time: about 30 MB of text and ids in memory
_STATS = ("n_read", "n_empty", "n_too_long", "n_bad_ratio")
_ARRAYS = ("src_ids", "src_spans", "tgt_ids", "tgt_spans")


@dataclass(frozen=True, eq=False)
class ParallelDataset:
    """Token ids of aligned pairs. `dataset[i] -> (src_ids, tgt_ids)` (int32 arrays, no BOS/EOS)."""

    src_ids: np.ndarray  # (total source tokens,) int32, memory-mapped when from the cache
    src_spans: np.ndarray  # (N, 2) int64: example i's ids are src_ids[start:end]
    tgt_ids: np.ndarray  # (total target tokens,) int32
    tgt_spans: np.ndarray  # (N, 2) int64
    stats: CorpusStats = CorpusStats()
    from_cache: bool = False  # True when loaded from the preprocessing cache

    def __len__(self) -> int:
        return len(self.src_spans)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"example {i} of {len(self)}")
        (s0, s1), (t0, t1) = self.src_spans[i], self.tgt_spans[i]  # -1 is the last, as in a list
        return self.src_ids[s0:s1], self.tgt_ids[t0:t1]

    @property
    def src_lengths(self) -> np.ndarray:
        return self.src_spans[:, 1] - self.src_spans[:, 0]

    @property
    def tgt_lengths(self) -> np.ndarray:
        return self.tgt_spans[:, 1] - self.tgt_spans[:, 0]

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
        return cls(*_flatten(src), *_flatten(tgt), stats or CorpusStats(n_read=len(src)))

    @classmethod
    def concat(cls, parts: Sequence["ParallelDataset"]) -> "ParallelDataset":
        """One dataset of `parts`' examples, in order; their reading counts summed (the ids are copied)."""
        if len(parts) == 1:
            return parts[0]

        def join(ids: str, spans: str) -> tuple[np.ndarray, np.ndarray]:
            starts = np.cumsum([0] + [len(getattr(p, ids)) for p in parts[:-1]])
            return (np.concatenate([getattr(p, ids) for p in parts]),
                    np.concatenate([getattr(p, spans) + start for p, start in zip(parts, starts)]))

        stats = CorpusStats(**{k: sum(getattr(p.stats, k) for p in parts) for k in _STATS})
        return cls(*join("src_ids", "src_spans"), *join("tgt_ids", "tgt_spans"), stats)

    def subset(self, indices: np.ndarray) -> "ParallelDataset":
        """The examples at `indices` (int array) or where `indices` is True (bool mask), in order."""
        idx = np.flatnonzero(indices) if np.asarray(indices).dtype == bool else np.asarray(indices, dtype=np.int64)
        return replace(self, src_spans=self.src_spans[idx], tgt_spans=self.tgt_spans[idx])

    def filter(self, max_len: Optional[int] = None, max_ratio: Optional[float] = None) -> "ParallelDataset":
        """Drop pairs longer than `max_len` subword tokens or with length ratio > `max_ratio`."""
        if max_len is None and max_ratio is None:
            return self
        keep, n_long, n_ratio = length_filter(self.src_lengths, self.tgt_lengths, max_len, max_ratio)
        stats = replace(self.stats, n_too_long=self.stats.n_too_long + n_long,
                        n_bad_ratio=self.stats.n_bad_ratio + n_ratio)
        return replace(self.subset(keep) if n_long or n_ratio else self, stats=stats)

    def cut_sources(self, room: int, keep: str) -> tuple["ParallelDataset", int]:
        """(this dataset with every source cut to at most `room` tokens at its `keep` end, how many were cut):
        `batching.keep_within` on every source, as spans (`keep`: a task's, "start" or "end")."""
        n_cut = int((self.src_lengths > room).sum())
        if not n_cut:
            return self, 0
        start, end = self.src_spans[:, 0], self.src_spans[:, 1]
        spans = np.stack([start, np.minimum(end, start + room)] if keep == "start"
                         else [np.maximum(start, end - room), end], axis=1)
        return replace(self, src_spans=spans), n_cut

    def sampler(self, max_tokens: int, seed: int = 0, shuffle: bool = True, rank: int = 0,
                world_size: int = 1, skip_overlong: bool = False, sort_by_length: bool = True) -> TokenBucketSampler:
        """A token-bucket sampler whose budget bounds `src.numel() + tgt_in.numel()` of each batch."""
        return TokenBucketSampler(self.src_lengths + 1, self.tgt_lengths + 1, max_tokens, seed=seed, shuffle=shuffle,
                                  rank=rank, world_size=world_size, skip_overlong=skip_overlong,
                                  sort_by_length=sort_by_length)

    def collate(self, indices: Sequence[int]) -> Batch:
        return collate([self[i] for i in indices])

    def share(self, token: int, sample: int = 1 << 22) -> tuple[float, float]:
        """The share of `token` among the first `sample` ids of each side (a cheap look, not a pass over all)."""
        return tuple(float(np.count_nonzero(ids[:sample] == token)) / max(min(len(ids), sample), 1)
                     for ids in (self.src_ids, self.tgt_ids))

    def save(self, directory: str | Path) -> None:
        """The arrays as `.npy` files and meta.json in `directory`, which appears whole or not at all."""
        with _CacheWriter(directory) as out:
            for name in _ARRAYS:
                out.array(name).write(getattr(self, name))
            out.finish(self.stats)

    @classmethod
    def load(cls, directory: str | Path) -> "ParallelDataset":
        """A `save`d directory, memory-mapped (no pickle)."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / "meta.json").read_text())
            if meta.get("version") != CACHE_VERSION:
                raise ValueError(f"cache version {meta.get('version')}, expected {CACHE_VERSION}")
            arrays = [np.load(directory / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in _ARRAYS]
            stats = CorpusStats(**{k: int(meta["stats"][k]) for k in _STATS})
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{directory}: unreadable preprocessed data ({e})") from None
        ds = cls(*arrays, stats, from_cache=True)
        for ids, spans in ((ds.src_ids, ds.src_spans), (ds.tgt_ids, ds.tgt_spans)):
            if spans.ndim != 2 or spans.shape[1:] != (2,) or len(spans) != len(ds.tgt_spans) or ids.ndim != 1 \
                    or (len(spans) and (spans[-1, 1] != len(ids) or spans[0, 0] != 0)):
                raise ValueError(f"{directory}: inconsistent preprocessed arrays")
        return ds


class _ArrayFile:
    """A 1-D or (n, 2) array written a chunk at a time: raw bytes first, a `.npy` once its length is known."""

    def __init__(self, path: Path, dtype: np.dtype, width: int):
        self.path, self.dtype, self.width, self.rows = path, np.dtype(dtype), width, 0
        self.raw: BinaryIO = open(path.with_suffix(".raw"), "wb")

    def write(self, chunk: np.ndarray) -> None:
        self.raw.write(np.ascontiguousarray(chunk, dtype=self.dtype).tobytes())
        self.rows += len(chunk)

    def finish(self) -> None:
        self.raw.close()
        shape = (self.rows, self.width) if self.width > 1 else (self.rows,)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        with open(self.path, "wb") as f, open(self.raw.name, "rb") as raw:
            np.lib.format.write_array_header_1_0(f, header)
            shutil.copyfileobj(raw, f, 1 << 24)
            f.flush()
            os.fsync(f.fileno())  # on disk before the directory is renamed into place
        os.unlink(self.raw.name)


class _CacheWriter:
    """A cache directory filled in a temporary one beside it and renamed into place when finished."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.directory.name}.", dir=self.directory.parent))
        self.files: dict[str, _ArrayFile] = {}

    def __enter__(self) -> "_CacheWriter":
        return self

    def __exit__(self, *exc) -> None:
        for f in self.files.values():
            f.raw.close()
        shutil.rmtree(self.tmp, ignore_errors=True)  # gone after a rename; what is left after an error

    def array(self, name: str) -> _ArrayFile:
        if name not in self.files:
            spans = name.endswith("_spans")
            self.files[name] = _ArrayFile(self.tmp / f"{name}.npy", np.int64 if spans else np.int32, 2 if spans else 1)
        return self.files[name]

    def finish(self, stats: CorpusStats, directory: Optional[Path] = None) -> None:
        """Write the arrays' headers and meta.json, and rename the whole into place (`directory`: elsewhere)."""
        directory = directory or self.directory
        for f in self.files.values():
            f.finish()
        meta = {"version": CACHE_VERSION, "stats": {k: getattr(stats, k) for k in _STATS}}
        (self.tmp / "meta.json").write_text(json.dumps(meta) + "\n")
        try:
            os.rename(self.tmp, directory)  # atomic; refused where a non-empty directory is in the way
        except OSError:
            self._replace(directory)

    def _replace(self, directory: Path) -> None:
        """Put this entry where another is: a finished one of another process stays (its readers keep it);
        a bad one is moved aside, then removed."""
        try:
            ParallelDataset.load(directory)
            return  # this entry, left in the temporary directory, goes at __exit__
        except ValueError:
            pass
        aside = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
        os.rename(directory, aside / "entry")
        os.rename(self.tmp, directory)
        shutil.rmtree(aside, ignore_errors=True)


def cache_key(files: Sequence[Path], is_tsv: bool, strict: bool, tokenizers: TokenizerPair) -> str:
    """Hash of everything the tokenized arrays depend on."""
    parts = {"version": CACHE_VERSION, "files": [sha256_file(f) for f in files], "tsv": is_tsv,
             "strict": strict, "src": tokenizers.src.fingerprint(), "tgt": tokenizers.tgt.fingerprint()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def tokenize_files(files: Sequence[Path], is_tsv: bool, tokenizers: TokenizerPair,
                   cache_dir: Optional[str | Path] = None, strict: bool = False) -> ParallelDataset:
    """Read and tokenize `files` (a pair, or one TSV) a chunk at a time into the cache, or load it from there."""
    stamps = [_stamp(f) for f in files]  # before the key hashes the bytes: a change after this is seen below
    path = Path(cache_dir or default_cache_dir()) / "preprocessed" / cache_key(files, is_tsv, strict, tokenizers)
    named = ", ".join(map(str, dict.fromkeys(files)))
    if path.is_dir():
        try:
            ds = ParallelDataset.load(path)
            log.info("preprocessing cache hit: skipped tokenization of %d pairs from %s (%s)", len(ds), named, path)
            return ds
        except ValueError as e:
            log.warning("ignoring bad cache entry: %s; tokenizing again", e)
    pairs = PairStream(files, is_tsv, strict)
    with _CacheWriter(path) as out:
        _encode_into(out, pairs, tokenizers)
        if [_stamp(f) for f in files] == stamps:
            out.finish(pairs.stats)
            log.info("tokenized %d pairs from %s; cached in %s", pairs.stats.n_read - pairs.stats.n_empty, named, path)
            return replace(ParallelDataset.load(path), from_cache=False)  # mapped, as a later run's
        # the key hashed other bytes than these pairs came from: they are used, from a directory no key names
        log.warning("%s changed while being read: its pairs are used but not cached", named)
        scratch = path.with_name(f".{path.name}.uncached-{os.getpid()}")
        out.finish(pairs.stats, scratch)
    ds = replace(ParallelDataset.load(scratch), from_cache=False)
    shutil.rmtree(scratch)  # the mapped arrays stay readable until the dataset goes
    return ds


def _encode_into(out: _CacheWriter, pairs: Iterable[tuple[str, str]], tokenizers: TokenizerPair) -> None:
    """Encode `pairs` a chunk at a time, appending each side's ids and spans to `out`."""
    ends = {"src": 0, "tgt": 0}  # ids written so far, per side
    it = iter(pairs)
    while chunk := list(itertools.islice(it, CHUNK_PAIRS)):
        for side, texts in (("src", [s for s, _ in chunk]), ("tgt", [t for _, t in chunk])):
            ids, spans = _flatten(getattr(tokenizers, side).encode_batch(texts))
            out.array(f"{side}_ids").write(ids)
            out.array(f"{side}_spans").write(spans + ends[side])
            ends[side] += len(ids)
    for name in _ARRAYS:
        out.array(name)  # an empty corpus still has its (empty) arrays


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
    """(ids (total,) int32, spans (N, 2) int64) of lists of ids."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    ends = np.cumsum(lengths)
    ids = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(ends[-1]) if len(ends) else 0)
    return ids, np.stack([ends - lengths, ends], axis=1)
