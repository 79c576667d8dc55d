"""Process-level settings for speed, applied by the `aiayn` command (not on import)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_allocator() -> bool:
    """Make glibc keep freed memory for reuse instead of handing it back to the OS.

    A training step frees and re-allocates the same multi-megabyte activation and
    gradient buffers every time; with glibc's defaults each one is a fresh mmap whose
    pages fault in one by one, which costs about 20% of a CPU step
    (benchmarks/train_throughput.py, allocator row). tcmalloc gives the same gain but has
    to be installed. Returns False where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    settings = {_M_MMAP_THRESHOLD: 32 << 20, _M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 64 << 20}
    ok = all(mallopt(param, value) == 1 for param, value in settings.items())
    log.debug("glibc allocator tuned: %s", ok)
    return ok
