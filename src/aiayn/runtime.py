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
