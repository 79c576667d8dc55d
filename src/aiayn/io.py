"""Atomic file writing: every file aiayn saves appears whole or not at all. A command's `-o`
output (`write_output`) is atomic only where the path is a regular file: it writes through the rest."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`.

    On any exception the temporary file is removed and `path` is left untouched, so a
    crash or kill -9 mid-write never leaves a truncated file under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; saved files get the usual mode
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_output(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) where a command's `-o PATH` points; "-" is stdout.

    A regular file, or a path not there yet, is replaced atomically (`atomic_write`). A symlink is
    followed: its target is written (atomically, when that is a regular file or absent) and the
    link stays a link. Anything else (a FIFO, a character device) is opened and written through:
    renaming over it would replace the node itself, and a FIFO's reader would get nothing.
    """
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path).resolve()  # a dangling link resolves to the path it names
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is None or stat.S_ISREG(mode):
        with atomic_write(target) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return
    with open(target, "w", encoding="utf-8") as f:  # a directory fails here: IsADirectoryError
        f.write(text)


def replace_dir(src: Path, dst: Path) -> None:
    """Rename the finished directory `src` to `dst`: atomic when `dst` is absent; an existing `dst`
    is moved aside first and removed after, so `dst` is never half old and half new."""
    if dst.exists():
        old = dst.with_name(f".old-{dst.name}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)
    _fsync_dir(dst.parent)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LockedError(RuntimeError):
    """Another process holds the lock; the message names its PID."""


@contextlib.contextmanager
def exclusive_lock(path: str | Path, what: str) -> Iterator[None]:
    """Hold an advisory lock (`fcntl.flock`) on `path` for the block, with this PID written in it.

    The kernel drops the lock when the process dies, even by kill -9, so a crashed run never
    leaves a stale lock. A second holder gets `LockedError` naming the first one's PID.
    """
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise LockedError(f"{what} is in use by another process (PID {holder}; lock file {path})") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        f.close()  # releases the lock
