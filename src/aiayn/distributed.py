"""torch.distributed setup for `torchrun --nproc_per_node=N -m aiayn train ...`.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them everything here is a no-op
single process. Backend: gloo on CPU; on CUDA NCCL for the gradients and gloo for the trainer's few CPU
numbers (`process_group_backend`). Only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = DistInfo()


def process_group_backend(device_type: str) -> str:
    """torch.distributed's backend for training on `device_type`. On GPUs DDP's gradients go through NCCL,
    which serves CUDA tensors only, so the trainer's few CPU numbers (`all_reduce`, `gather_objects`) go
    through gloo in the same group."""
    return "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"


def init_from_env(device_type: str) -> DistInfo:
    """Join the process group torchrun describes in the environment, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    info = DistInfo(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        backend = process_group_backend(device_type)
        if device_type == "cuda":
            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(backend=backend)
        log.info("rank %d/%d joined the %s process group", info.rank, world, backend)
    return info


@contextlib.contextmanager
def main_first(info: DistInfo) -> Iterator[None]:
    """Rank 0 runs the block first, the other ranks after it (e.g. rank 0 tokenizes a corpus into the cache,
    the others then load it). A no-op in a single process."""
    if info.enabled and not info.is_main:
        dist.barrier()
    yield
    if info.enabled and info.is_main:
        dist.barrier()


def wrap_ddp(model: torch.nn.Module, device: torch.device, unused_parameters: bool = False):
    """`model` in DistributedDataParallel. A task whose loss leaves some parameters without a gradient
    (the encoder-only model's MLM head while it classifies) passes `unused_parameters` (its class
    attribute of that name), so that DDP looks for them at every step instead of failing at the second."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=unused_parameters)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce(values: list[float], info: DistInfo, op: str = "sum", device: str | torch.device = "cpu") -> list[float]:
    """Sum (or max, or min) a few numbers over all ranks; identity on one process."""
    if not info.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return t.tolist()


def gather_objects(obj, info: DistInfo) -> list:
    """Every rank's `obj`, in rank order, on every rank (small objects only)."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out
