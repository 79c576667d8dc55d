"""Where and how a process runs: the device and the seeds. Used by training and inference alike."""

from __future__ import annotations

import random

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


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_device(device) -> None:
    """Process-wide settings for training on `device`. On CUDA, cuDNN's fused attention is switched
    off: it builds an execution plan for every new (batch, length) shape, about 0.4 s each (measured
    on an H100 in bf16), and token-bucketed batches bring a new shape almost every step; the flash
    and memory-efficient kernels need no such plan."""
    import torch

    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
