"""`aiayn.runtime`'s process settings for commands. `keep_freed_memory`: a large freed tensor stays in the
process for reuse (so the next one is not mmapped and page-faulted afresh); by default glibc hands it back.
Each case runs in its own process: malloc settings are process-wide. `bound_onednn_caches`: the oneDNN
cache sizes a command sets, where the user has not."""

import os
import platform
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from aiayn.runtime import ONEDNN_CACHE_CAPACITY, bound_onednn_caches, page_out

PROBE = """
import os, sys, torch
from aiayn.runtime import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = rss()
x = torch.ones(64 * 2**20 // 4)  # 64 MB, written
del x
print(rss() - before)
"""


def _kept_bytes(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_a_freed_64_mb_tensor_stays_only_when_asked():
    assert _kept_bytes("default") < 16 * 2**20  # mmapped, then returned
    assert _kept_bytes("keep") > 48 * 2**20  # in the heap, ready for the next one


def _rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="Linux's madvise")
def test_page_out_hands_back_a_mapped_tensors_pages_and_keeps_its_values(tmp_path):
    save_file({"w": torch.randn(2**23)}, str(tmp_path / "w.safetensors"))  # 32 MB
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as f:
        mapped = f.get_tensor("w")  # a view of the file (`PretrainedModel.assign_weights`)
    want = mapped.clone()
    assert torch.equal(mapped, want)  # every page read: resident
    before = _rss()
    if not page_out(mapped):
        pytest.skip("this kernel does not take MADV_PAGEOUT (Linux 5.4+)")
    assert before - _rss() > 16 * 2**20
    assert torch.equal(mapped, want)  # read again from the file


def test_auto_device_keeps_int8_on_the_cpu(monkeypatch):
    """int8 weights run on the CPU alone (torch._int_mm, oneDNN): 'auto' picks it for them, also where a GPU is found."""
    import torch

    from aiayn.runtime import inference_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    assert inference_device("auto", "int8") == torch.device("cpu")
    assert inference_device("auto") == torch.device("cuda")
    assert inference_device("cpu", "int8") == torch.device("cpu")


def test_no_cudnn_attention_switches_only_cuda_and_puts_the_switch_back():
    """The switch is a process-wide flag (settable without a GPU): off inside for a CUDA device, as it
    was after, also when the body raises; a CPU device leaves it alone."""
    import torch

    from aiayn.runtime import no_cudnn_attention

    enabled, original = torch.backends.cuda.cudnn_sdp_enabled, torch.backends.cuda.cudnn_sdp_enabled()
    try:
        for was in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(was)
            with no_cudnn_attention(torch.device("cuda")):
                assert not enabled()
            assert enabled() == was
            with pytest.raises(RuntimeError), no_cudnn_attention("cuda:0"):
                raise RuntimeError("the run fails")
            assert enabled() == was
            with no_cudnn_attention("cpu"):
                assert enabled() == was
    finally:
        torch.backends.cuda.enable_cudnn_sdp(original)


def test_count_cuda_syncs_counts_the_warned_waits_and_puts_the_mode_back(monkeypatch):
    """torch's sync debug mode is process-wide: the count switches it to 'warn' for `fn` alone and
    leaves the mode it found (here 'error', as a caller's own check would set), also when `fn` raises.
    The mode is kept by a stand-in, since a CPU build of torch has none."""
    import warnings

    import torch

    from aiayn.runtime import count_cuda_syncs

    mode = {"now": "error"}
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["now"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda m: mode.update(now=m))

    def two_waits():
        assert mode["now"] == "warn"
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation")
        warnings.warn("an unrelated warning")

    assert count_cuda_syncs(two_waits) == 2
    assert mode["now"] == "error"
    with pytest.raises(ZeroDivisionError):
        count_cuda_syncs(lambda: 1 / 0)
    assert mode["now"] == "error"


def test_onednn_caches_are_bounded_unless_the_user_set_them(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    bound_onednn_caches()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == ONEDNN_CACHE_CAPACITY
    assert os.environ["LRU_CACHE_CAPACITY"] == "7"  # the user's
