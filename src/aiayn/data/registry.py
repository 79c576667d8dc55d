"""Known corpora: where their files come from, and a verified download cache.

`resolve_files(name, split, langs)` finds the file of each language, in this order:

1. `data_dir` (argument, e.g. `--data-dir`): `data_dir/{name}/` or `data_dir/` itself.
   If it is given and lacks a file, that is an error: the user said where the data is.
2. `$AIAYN_DATA_DIR`, same layout; if it lacks a file, fall through.
3. the download cache `{cache_dir}/downloads/{name}/`, default cache `~/.cache/aiayn`
   (`$AIAYN_CACHE_DIR` overrides). A cached file is re-hashed before use.
4. a download from the corpus' public URL: streamed to a temporary file (progress is
   logged every 10%), its sha256 checked, then renamed into the cache. A dropped connection is retried;
   a wrong checksum is an error at once. Nothing unverified is ever left under a cache name.
"""

from __future__ import annotations

from types import MappingProxyType

import hashlib
import http.client
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from aiayn.io import atomic_write

log = logging.getLogger(__name__)

CHUNK = 1 << 16


class DownloadError(OSError):
    """A download failed for good (after retries, or a checksum mismatch)."""


@dataclass(frozen=True)
class KnownCorpus:
    """A public parallel corpus whose files are `{split}.{lang}` (+ `remote_suffix`) at `base_url`."""

    name: str
    langs: tuple[str, ...]
    splits: tuple[str, ...]
    base_url: Optional[str]
    remote_suffix: str  # ".gz" where the server holds gzipped files, "" for plain text
    sha256: dict[str, str] = field(default_factory=dict)  # remote file name -> hex digest
    note: str = ""

    def remote_name(self, split: str, lang: str) -> str:
        return f"{split}.{lang}{self.remote_suffix}"

    def check(self, split: str, langs: Sequence[str]) -> None:
        if split not in self.splits:
            raise ValueError(f"corpus {self.name!r} has no split {split!r}; choose from {', '.join(self.splits)}")
        for lang in langs:
            if lang not in self.langs:
                raise ValueError(f"corpus {self.name!r} has no language {lang!r}; choose from {', '.join(self.langs)}")


MULTI30K = KnownCorpus(
    name="multi30k",
    langs=("en", "de", "fr", "cs"),
    splits=("train", "val", "test_2016_flickr"),
    base_url="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw",
    remote_suffix=".gz",
    sha256={
        "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
        "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
        "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
        "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
        "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
        "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
        "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
        "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
        "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
        "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    },
    note="Multi30k task 1 (Elliott et al. 2016), raw cased captions; non-commercial research use",
)

SMALL_PARALLEL_ENJA = KnownCorpus(
    name="small-parallel-enja",
    langs=("en", "ja"),
    splits=("train", "dev", "test"),
    base_url="https://raw.githubusercontent.com/odashi/small_parallel_enja/master",
    remote_suffix="",
    sha256={
        "dev.en": "04a2673449770657fd5e3b963cb856be3130923212b6db8ac7eaeef18f06c041",
        "dev.ja": "cd534f56b8639dc130f86a365e5ec0aa70042000bdd740a622fbbf8b6be4acca",
        "test.en": "45edb380749ec2b49cca7618fc5a7595fc9f791180672ba466b90c873a4aa8bf",
        "test.ja": "d37dc460a81b064e4106c8913eb11fa300da05cf3f58a7a5bbfec7e20947ddef",
        "train.en": "148b05dcd28638fe20ee84f2b1127001c80982be352007dda241fb759adadc76",
        "train.ja": "fc81a1434349ec98a449d7ae9cd2530057f689637684ecfed3501ea6a8a07ecc",
    },
    note="50k Tanaka Corpus pairs, pre-tokenized lower-cased en, KyTea-segmented ja",
)

REGISTRY: Mapping[str, KnownCorpus] = MappingProxyType({c.name: c for c in (MULTI30K, SMALL_PARALLEL_ENJA)})


def get(name: str) -> KnownCorpus:
    if name not in REGISTRY:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def default_cache_dir() -> Path:
    return Path(os.environ.get("AIAYN_CACHE_DIR") or Path.home() / ".cache" / "aiayn")


def resolve_files(
    name: str,
    split: str,
    langs: Sequence[str],
    data_dir: Optional[str | Path] = None,
    cache_dir: Optional[str | Path] = None,
    base_url: Optional[str] = None,
    retries: int = 3,
    backoff_s: float = 1.0,
    timeout_s: float = 60.0,
) -> list[Path]:
    """One local path per language of `split` of corpus `name` (see the module docstring).

    `base_url` replaces the registry URL (tests point it at a local server).
    """
    corpus = get(name)
    corpus.check(split, langs)
    return [_resolve_one(corpus, split, lang, data_dir, cache_dir, base_url, retries, backoff_s, timeout_s)
            for lang in langs]


def _resolve_one(corpus: KnownCorpus, split: str, lang: str, data_dir, cache_dir, base_url,
                 retries: int, backoff_s: float, timeout_s: float) -> Path:
    if data_dir is not None:
        found = _find_local(Path(data_dir), corpus.name, split, lang)
        if found is None:
            raise FileNotFoundError(f"{data_dir}: no {split}.{lang}[.gz] for corpus {corpus.name!r} "
                                    f"(looked in {data_dir} and {Path(data_dir) / corpus.name})")
        return found
    env = os.environ.get("AIAYN_DATA_DIR")
    if env and (found := _find_local(Path(env), corpus.name, split, lang)) is not None:
        return found
    name = corpus.remote_name(split, lang)
    target = Path(cache_dir or default_cache_dir()) / "downloads" / corpus.name / name
    expected = corpus.sha256.get(name)
    if target.is_file():
        if expected is None or sha256_file(target) == expected:
            return target
        log.warning("cached %s fails its sha256 check; downloading it again", target)
        target.unlink(missing_ok=True)  # another process (a DDP rank) may have removed it first
    url_base = base_url or corpus.base_url
    if url_base is None:
        raise FileNotFoundError(f"corpus {corpus.name!r} has no download URL; pass data_dir or set AIAYN_DATA_DIR")
    download(f"{url_base.rstrip('/')}/{name}", target, expected, retries, backoff_s, timeout_s)
    return target


def _find_local(root: Path, name: str, split: str, lang: str) -> Optional[Path]:
    for directory in (root / name, root):
        for fname in (f"{split}.{lang}", f"{split}.{lang}.gz"):
            if (directory / fname).is_file():
                return directory / fname
    return None


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, target: str | Path, sha256: Optional[str], retries: int = 3,
             backoff_s: float = 1.0, timeout_s: float = 60.0) -> Path:
    """Fetch `url` to `target` through a temporary file; rename only after the checksum passes.

    Connection failures (refused, reset, timeout, body shorter than Content-Length) are
    retried `retries` times with exponential backoff; HTTP errors and a checksum mismatch
    raise `DownloadError` at once. `target` exists afterwards only if it verified.
    """
    target = Path(target)
    for attempt in range(retries + 1):
        try:
            _fetch_verified(url, target, sha256, timeout_s)
            return target
        except (urllib.error.HTTPError, DownloadError):
            raise
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as e:
            if attempt == retries:
                raise DownloadError(f"download of {url} failed after {retries + 1} attempts: {e!r}; without a "
                                    "network, put the file in a directory and pass it as data.data_dir (or set "
                                    "AIAYN_DATA_DIR)") from None
            wait = backoff_s * 2 ** attempt
            log.warning("download of %s interrupted (%r); retry %d/%d in %.1f s", url, e, attempt + 1, retries, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _fetch_verified(url: str, target: Path, sha256: Optional[str], timeout_s: float) -> None:
    h = hashlib.sha256()
    try:
        response = urllib.request.urlopen(url, timeout=timeout_s)  # noqa: S310 (http(s) URL from the registry)
    except urllib.error.HTTPError as e:
        raise DownloadError(f"download of {url} failed: HTTP {e.code} {e.reason}") from None
    with response, atomic_write(target) as tmp, open(tmp, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        received, next_report = 0, 0.1
        while chunk := response.read(CHUNK):
            out.write(chunk)
            h.update(chunk)
            received += len(chunk)
            if total and received / total >= next_report:
                log.info("%s: %d%% of %d bytes", target.name, int(100 * received / total), total)
                next_report += 0.1
        if total is not None and received != total:
            raise http.client.IncompleteRead(b"", total - received)
        out.flush()
        if sha256 is not None and h.hexdigest() != sha256:
            raise DownloadError(f"download of {url} is corrupt: sha256 {h.hexdigest()}, expected {sha256}; "
                                f"nothing was cached")
    log.info("downloaded %s (%d bytes, sha256 verified) to %s", url, received, target)
