"""Atomic file writing: every file aiayn saves appears whole or not at all. A command's `-o`
output (`write_output`) is atomic only where the path is a regular file: it writes through the rest."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

log = logging.getLogger(__name__)


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
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def read_utf8(path: str | Path) -> str:
    """The text of a UTF-8 file; an invalid byte is a ValueError naming the file and line (`utf8_error`)."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(utf8_error(path, raw, e)) from None


def read_json_object(path: str | Path, missing_ok: bool = False) -> dict:
    """The JSON object in file `path` (config.json, task.json, a manifest); a missing file ({} with
    `missing_ok`), bad UTF-8 or JSON, or a value other than an object is an error naming the file."""
    import json

    path = Path(path)
    if not path.is_file():
        if missing_ok:
            return {}
        raise FileNotFoundError(f"{path}: not found")
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def utf8_error(path: str | Path, data: bytes, e: UnicodeDecodeError) -> str:
    """"PATH:LINE: invalid UTF-8 (...)" for `e`, raised decoding `data`, the bytes of `path`."""
    line = data.count(b"\n", 0, e.start) + 1
    return f"{path}:{line}: invalid UTF-8 ({e.reason} at byte {e.start})"


def write_output(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) where a command's `-o PATH` points; "-" is stdout (see `output_file`)."""
    with output_file(path, binary=isinstance(data, bytes)) as f:
        f.write(data)


@contextlib.contextmanager
def output_file(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """An open file (UTF-8 text, or bytes) for a command's `-o PATH`; "-" is stdout.

    A regular file, or a path not there yet, is replaced atomically (`atomic_write`) when the block
    ends without an error, so a command that fails or is killed leaves the old file as it was. A
    symlink is followed: its target is written (atomically, when that is a regular file or absent)
    and the link stays a link. Anything else (a FIFO, a character device) is opened and written
    through: renaming over it would replace the node itself, and a FIFO's reader would get nothing.
    A path to one of this process's open files (/dev/stdout, /dev/fd/N, /proc/self/fd/N) writes to
    that file descriptor, at its position and in its mode (a shell's `>>` appends), as "-" does.
    """
    with _naming(path):
        yield from _output_file(path, binary)


@contextlib.contextmanager
def _naming(path: str | Path) -> Iterator[None]:
    """An OSError without a file name (a write to a full disk, /dev/full) gets `path` as its name."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None and str(path) != "-":  # stdout's EPIPE: the CLI's own case
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def _output_file(path: str | Path, binary: bool) -> Iterator[IO]:
    mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    if str(path) == "-":
        out = sys.stdout.buffer if binary else sys.stdout
        yield out
        out.flush()
        return
    fd = named_fd(path)
    if fd is not None:
        sys.stdout.flush(), sys.stderr.flush()  # what was printed before goes first
        with os.fdopen(os.dup(fd), mode, encoding=encoding) as f:
            yield f
        return
    target = Path(path).resolve()  # a dangling link resolves to the path it names
    try:
        kind = target.stat().st_mode
    except FileNotFoundError:
        kind = None
    if kind is None or stat.S_ISREG(kind):
        with atomic_write(target) as tmp, open(tmp, mode, encoding=encoding) as f:
            yield f
        return
    with open(target, mode, encoding=encoding) as f:  # a directory fails here: IsADirectoryError
        yield f


def read_tensors(path: str | Path, names: Sequence[str] | None = None) -> dict:
    """The tensors of the safetensors file `path` (those of `names`, else all) on the CPU; a damaged
    file is a ValueError naming it. Never pickle: safetensors holds nothing but tensors."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return {name: f.get_tensor(name) for name in (f.keys() if names is None else names)}
    except Exception as e:  # safetensors raises its own types for truncated or corrupt files
        raise ValueError(f"{path}: cannot load weights ({e})") from e


def tensor_names(path: str | Path) -> list[str]:
    """The names in the safetensors file `path`, read from its header; a damaged file is a ValueError naming it."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return list(f.keys())
    except Exception as e:
        raise ValueError(f"{path}: cannot read its tensor names ({e})") from e


def named_fd(path: str | Path) -> int | None:
    """The file descriptor of this process that `path` names through /proc/PID/fd (/dev/stdout,
    /dev/fd/N and /proc/self/fd/N all lead there), else None. Resolving such a path gives the file
    behind the descriptor (or a made-up "pipe:[N]"), which must not be replaced or reopened."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        parent, name = os.path.split(p)
        if name.isdigit() and os.path.realpath(parent) == f"/proc/{os.getpid()}/fd":
            return int(name)
        if not os.path.islink(p):
            return None
        p = os.path.join(parent, os.readlink(p))
    return None


@contextlib.contextmanager
def atomic_dir(path: str | Path, make: bool = True) -> Iterator[Path]:
    """Yield a fresh directory beside `path` (made, unless `make` is False for a writer that makes its
    own) to fill; when the block ends without an error it replaces `path` (`replace_dir`), else it is
    removed and `path` is left as it was. A symlink is followed: its target is replaced, the link stays."""
    final = Path(path).resolve()
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if make:
        tmp.mkdir(parents=True)
    try:
        yield tmp
        replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_replaceable(path: str | Path, ours: Callable[[Path], bool], kind: str,
                      sources: Sequence[str | Path] = ()) -> None:
    """Refuse to replace `path` unless it is absent, an empty directory or a directory of `kind` (`ours`
    says which), and never one of `sources`, the directories being read: a slip of -o loses nothing."""
    path = Path(path)
    if any(Path(s).resolve().is_relative_to(path.resolve()) for s in sources):  # replacing it would remove them
        raise FileExistsError(f"{path}: is, or holds, an input; write the output somewhere else")
    if path.exists() and not (path.is_dir() and (ours(path) or not any(path.iterdir()))):
        raise FileExistsError(f"{path}: exists and is not {kind}; remove it or choose another")


def replace_dir(src: Path, dst: Path) -> None:
    """Rename the finished directory `src` to `dst`: atomic when `dst` is absent; an existing `dst`
    is moved aside first and removed after, so `dst` is never half old and half new (a crash between
    the two renames leaves it aside, where `restore_replaced` finds it)."""
    if dst.exists():
        old = dst.with_name(f"{_ASIDE}{dst.name}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)
    _fsync_dir(dst.parent)


_ASIDE = ".old-"  # replace_dir's prefix for the directory it replaces


def restore_replaced(dst: Path) -> None:
    """Undo a `replace_dir` that a crash cut between its two renames: a missing `dst` comes back from where it
    was moved aside; beside an existing `dst`, such leftovers are removed."""
    aside = sorted(dst.parent.glob(f"{_ASIDE}{dst.name}-*"), key=lambda p: p.stat().st_mtime_ns)
    if aside and not dst.exists():
        os.replace(aside.pop(), dst)
        log.warning("%s: restored from where a crash left it (%s)", dst, dst.parent)
    for leftover in aside:
        shutil.rmtree(leftover, ignore_errors=True)


def _mode_for(path: Path) -> int:
    """The permission bits a file saved as `path` gets: those of the file it replaces (a private 0600
    file stays private), else the usual 0666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


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
