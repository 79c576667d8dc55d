"""Where and how a process runs: the device and the seeds. Used by training and inference alike."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import platform
import random
from typing import Iterator


class MissingExtra(ImportError, RuntimeError):
    """An optional dependency is not installed; the message says which extra brings it. A RuntimeError
    too, so that the CLI reports it in one line (`aiayn.cli.EXPECTED_ERRORS`)."""


DEVICES_HELP = "'auto' (cuda if available), 'cpu', 'cuda' or 'cuda:N'"


def resolve_device(name: str, local_rank: int = 0):
    """`RunConfig.device` (or --device) as a torch.device; under DDP 'cuda' means this rank's GPU."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if not (name == "cpu" or name.startswith("cuda")):
        raise ValueError(f"device must be {DEVICES_HELP}, got {name!r}")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but no CUDA device is available")
        if name == "cuda" and local_rank:
            name = f"cuda:{local_rank}"
    return torch.device(name)


def inference_device(name: str, quantize: str | None = None):
    """--device of the inference commands: as `resolve_device`, but 'auto' stays on the CPU for int8
    weights, which only the CPU runs (FBGEMM): on a GPU machine `--quantize int8` alone still works."""
    return resolve_device("cpu" if name == "auto" and quantize == "int8" else name)


def count_cuda_syncs(fn) -> int:
    """How many times `fn()` makes the host wait for the GPU: torch's sync debug mode warns at each
    wait (a prototype in torch: it may miss some kinds of wait, never counts one that is not)."""
    import warnings

    import torch

    found = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode(found)
    return sum("synchroniz" in str(w.message) for w in caught)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def no_cudnn_attention(device) -> Iterator[None]:
    """On CUDA, scaled dot-product attention without cuDNN's fused kernel while inside; its switch is
    put back as it was found (also on an exception). cuDNN builds an execution plan for every new
    (batch, length) shape, about 0.4 s each on an H100 (its kernel takes half types only, so this is
    a bf16/fp16 matter): token-bucketed training batches bring a new shape almost every step, and
    decoding brings one every step, the keys growing by one (docs/history/results-2026-11.md, under the H100: bf16
    training 8-12x, bf16 decoding of Multi30k's test about 3x slower with it). The flash and
    memory-efficient kernels need no plan. Elsewhere it changes nothing."""
    import torch

    if torch.device(device).type != "cuda":
        yield
        return
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is Linux's glibc (mallopt, malloc_trim, madvise), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(None)


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of returning it to the system. By
    default a block over 32 MB (a (K, T, V) float32 vocabulary tensor is 47 MB on AESLC's batches)
    is mmapped afresh and page-faulted in on first touch at every allocation: on 2 cores that made
    the copy mixture and loss of an AESLC update 2x slower (`benchmarks/cpu_training_ops.py` with
    and without --keep-freed-memory). The process's memory stays at its peak instead.
    For commands (the process is theirs), not for library code. False where glibc is not the C library."""
    libc = _glibc()
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    return libc is not None and bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def release_freed_memory() -> bool:
    """Hand the memory that is free inside the process back to the system (glibc's `malloc_trim`): after
    a step that peaks and is done, such as training a vocabulary (sentencepiece holds its whole sample), so
    the next step does not stack its own peak on the residue. False where glibc is not the C library."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def page_out(t) -> bool:
    """Have the kernel reclaim the whole pages of tensor `t` now (madvise MADV_PAGEOUT, Linux 5.4+). For a
    tensor memory-mapped from a file (`PretrainedModel.assign_weights`) its clean pages are dropped and read
    from the file again if touched: nothing is lost, and quantizing a model one matrix after another does
    not hold the whole fp32 file resident. Memory not backed by a file (a tensor written since) goes to swap
    where there is swap, else stays. False where the kernel or C library does not take it."""
    libc = _glibc()
    page, madv_pageout = mmap.PAGESIZE, 21  # <sys/mman.h>
    first, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    start, stop = -(-first // page) * page, end // page * page  # the pages wholly inside t
    if libc is None or not t.is_cpu or stop <= start:
        return False
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), madv_pageout) == 0


ONEDNN_CACHE_CAPACITY = "64"  # primitives kept per process (oneDNN's default: 1,024)


def bound_onednn_caches() -> None:
    """Keep oneDNN's primitive cache (and ideep's, beside it) to ONEDNN_CACHE_CAPACITY entries. bf16 matmuls
    on the CPU run through oneDNN, which builds and caches a primitive, with its own buffers, for every new
    shape; token-bucketed batches bring a new shape nearly every update, so a training run's memory grew by
    gigabytes (recipes/multi30k-de-en-copy.toml over its 30 minutes: 4.0 GB at minute 1, 9.5 GB at 30, still
    growing; with 64: 2.1 GB, then flat at 2.6 GB, and 1,173 updates instead of 1,034; `benchmarks/train_memory.py`,
    docs/history/results-2026-11.md). A value the user
    set in the environment wins. Read when oneDNN makes its first primitive: call it before the first bf16
    op. For commands (the process is theirs), not for library code."""
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(name, ONEDNN_CACHE_CAPACITY)


def flush_denormals() -> None:
    """Flush denormal floats to zero (FTZ/DAZ) in this thread and in every thread it starts from now on:
    torch's OpenMP pool takes the setting when it is made, at the first parallel op, so call it before that.
    Values below 1.2e-38 (a swish FFN's outputs for very negative inputs, underflowing exponentials) run
    through the x86 microcode many times slower, and change no logit that matters
    (`benchmarks/beam_profile.py --keep-denormals` compares). For commands (the process is theirs), not
    for library code; `FastDecoder` sets it in the thread that decodes."""
    import torch

    torch.set_flush_denormal(True)


@contextlib.contextmanager
def preserved_process_state() -> Iterator[None]:
    """Leave the process-wide settings that a run changes as they were found (also when it raises):
    torch's intra-op thread count and the global random states that `seed_everything` seeds: Python's
    `random`, NumPy's, torch's CPU generator, and CUDA's generators (cuDNN's attention switch is put
    back by `no_cudnn_attention`, the context that turns it off). Where CUDA was not yet initialised,
    a seed queued for its first use (`torch.manual_seed` queues one) is put back; if the run
    initialised CUDA, its generators are reset as that first use would have set them: a
    nondeterministic seed, then the queued seeds. Other accelerators' generators (MPS, XPU) are not
    restored."""
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    python, numpy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_initialised = torch.cuda.is_initialized()
    cuda = torch.cuda.get_rng_state_all() if cuda_initialised else None
    queued = None if cuda_initialised else _queued_cuda_seeds()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(cpu)
        if cuda_initialised:
            torch.cuda.set_rng_state_all(cuda)
        elif queued is not None:
            _requeue_cuda_seeds(queued)


def _queued_cuda_seeds() -> tuple | None:
    """The seeds that `torch.cuda` holds for its first initialisation: torch's private lazy-seed
    tracker (None where this torch has none)."""
    import torch

    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    if tracker is None:
        return None
    return tracker.manual_seed_all_cb, tracker.manual_seed_cb, list(tracker.call_order)


def _requeue_cuda_seeds(queued: tuple) -> None:
    import torch

    if not torch.cuda.is_initialized():
        tracker = torch.cuda._lazy_seed_tracker
        tracker.manual_seed_all_cb, tracker.manual_seed_cb, tracker.call_order = queued[0], queued[1], list(queued[2])
        return
    for generator in torch.cuda.default_generators:
        generator.seed()  # a nondeterministic seed, as torch gives a new device's generator
    for call in queued[2]:
        if call is not None:
            call[0]()  # (callback, traceback): as CUDA's initialisation runs them


def stable_hash(text: str) -> int:
    """A 64-bit hash of `text` that is the same in every process and on every machine (Python's
    `hash` of a str is salted per process): for seeds and fixed data splits."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


PRECISION_CHOICES = ("auto", "fp32", "bf16")  # decoding; training also takes "fp16" (CUDA)


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them in /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(device="cpu") -> bool:
    """Whether `device` multiplies bf16 matrices natively: a CUDA GPU that supports bf16, or a CPU with
    avx512_bf16 or AMX (elsewhere a CPU emulates bf16 matmuls, slower than fp32). The flags are what
    `benchmarks/train_throughput.py` confirms by timing a bf16 matmul against an fp32 one."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def resolve_precision(precision: str, device="cpu") -> str:
    """"auto" -> "bf16" where `device` has native bf16 (`native_bf16`), else "fp32"; others as given."""
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision
