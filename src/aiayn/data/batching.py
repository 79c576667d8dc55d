"""Token-bucketed batches (§5.1: "each training batch contained ... approximately 25000
source tokens and 25000 target tokens"), as in fairseq's `batch_by_size`.

Batch cost. For a batch of n examples with lengths (s_i, t_i), as passed to the sampler:

    cost = n * max_i s_i + n * max_i t_i

i.e. the number of elements in the padded source tensor plus the padded target tensor.
`ParallelDataset.sampler` passes target lengths + 1 so that the cost is exactly
`src.numel() + tgt_in.numel()` of the collated batch (tgt_in = BOS + y). No batch costs
more than `max_tokens`.

Packing. Every epoch, examples are put in a seeded random order (so equal-length examples
mix differently each epoch), stably sorted by (source length, target length), and packed
greedily. The batch order is then shuffled by (seed, epoch). With `sort_by_length=False`
the random order is packed as it is: batches of mixed lengths, under the same budget
(more padding; it helps tiny synthetic tasks, where length-sorted batches bias updates).

Shards. Batch j of the shuffled list goes to rank j % world_size. When the batch count is
not a multiple of world_size, the largest batches are split in two until it is, so every
rank gets the same number of batches (DDP needs equal step counts) and every example is
in exactly one batch of one rank per epoch; nothing is dropped or duplicated.

An example whose own cost exceeds `max_tokens` raises ValueError, or with
`skip_overlong=True` is left out of every epoch and counted in `n_skipped`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID

log = logging.getLogger(__name__)


class TokenBucketSampler:
    """Batches of example indices whose padded size is at most `max_tokens` (see module doc).

    Usable as a `torch.utils.data.DataLoader(batch_sampler=...)`: iterate it after `set_epoch`.
    """

    def __init__(
        self,
        src_lens: Sequence[int] | np.ndarray,
        tgt_lens: Sequence[int] | np.ndarray,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        skip_overlong: bool = False,
        sort_by_length: bool = True,
    ) -> None:
        self.src_lens = np.asarray(src_lens, dtype=np.int64)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64)
        if self.src_lens.shape != self.tgt_lens.shape or self.src_lens.ndim != 1:
            raise ValueError(f"src_lens and tgt_lens must be 1-D of equal length, "
                             f"got {self.src_lens.shape} and {self.tgt_lens.shape}")
        if not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
        self.max_tokens, self.seed, self.shuffle = int(max_tokens), int(seed), shuffle
        self.rank, self.world_size, self.sort_by_length = rank, world_size, sort_by_length
        self.epoch = 0
        own_cost = self.src_lens + self.tgt_lens
        overlong = np.flatnonzero(own_cost > self.max_tokens)
        if len(overlong) and not skip_overlong:
            i = int(overlong[0])
            raise ValueError(f"example {i} alone needs {own_cost[i]} tokens (source {self.src_lens[i]}, target "
                             f"{self.tgt_lens[i]}) > max_tokens {self.max_tokens}; raise max_tokens, filter by "
                             f"length, or pass skip_overlong=True ({len(overlong)} such examples)")
        self.n_skipped = len(overlong)
        if self.n_skipped:  # a task counts them in its report (`tasks.base.Drops`), which warns
            log.info("skipping %d examples longer than max_tokens=%d", self.n_skipped, self.max_tokens)
        self._usable = np.flatnonzero(own_cost <= self.max_tokens)
        if len(self._usable) < world_size:
            raise ValueError(f"{len(self._usable)} usable examples cannot fill {world_size} ranks")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches(self.epoch))

    def __len__(self) -> int:
        return len(self.batches(self.epoch))

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches for `epoch`; identical for identical (seed, epoch, lengths)."""
        all_batches = self.global_batches(epoch)
        return all_batches[self.rank::self.world_size]

    def global_batches(self, epoch: int) -> list[list[int]]:
        """All ranks' batches for `epoch`, in order; rank r takes every world_size-th from r."""
        rng = np.random.default_rng([self.seed, epoch])
        order = self._usable[rng.permutation(len(self._usable))] if self.shuffle else self._usable
        if self.sort_by_length:
            order = order[np.lexsort((self.tgt_lens[order], self.src_lens[order]))]  # stable: ties keep random order
        batches = _pack(order, self.src_lens, self.tgt_lens, self.max_tokens)
        batches = _split_to_multiple(batches, self.world_size, rng if self.shuffle else None)
        if self.shuffle and self.sort_by_length:  # unsorted batches are in random order already
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _pack(order: np.ndarray, src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int,
          chunk: int = 1 << 16) -> list[list[int]]:
    """Greedy packing of `order` (sorted by length) under the cost of the module docstring. The lengths are
    walked `chunk` at a time: a WMT-sized epoch never holds its lengths as Python ints all at once."""
    starts, n, max_s, max_t = [0], 0, 0, 0  # starts: where each batch begins in `order`
    for at in range(0, len(order), chunk):
        part = order[at:at + chunk]
        for k, (s, t) in enumerate(zip(src_lens[part].tolist(), tgt_lens[part].tolist()), start=at):
            new_s, new_t = max(max_s, s), max(max_t, t)
            if n and (n + 1) * (new_s + new_t) > max_tokens:
                starts.append(k)
                n, new_s, new_t = 0, s, t
            n, max_s, max_t = n + 1, new_s, new_t
    return [b.tolist() for b in np.split(order, starts[1:])] if len(order) else []


def _split_to_multiple(batches: list[list[int]], k: int, rng: np.random.Generator | None = None) -> list[list[int]]:
    """Split the largest batches in two until len(batches) % k == 0 (a half never costs more). When
    every batch is down to one example, len % k of them are left out of this epoch, with a warning, as
    DistributedSampler's drop_last does: drawn by `rng`, so each epoch leaves out others (the last ones,
    still sorted by length, were the longest examples every epoch); the last ones without it."""
    while len(batches) % k:
        j = max(range(len(batches)), key=lambda b: len(batches[b]))
        big = batches[j]
        if len(big) < 2:
            extra = len(batches) % k
            log.warning("%d single-example batches do not divide among %d processes: %d are left out of this "
                        "epoch", len(batches), k, extra)
            out = set(rng.choice(len(batches), extra, replace=False).tolist()) if rng is not None else set(
                range(len(batches) - extra, len(batches)))
            return [b for i, b in enumerate(batches) if i not in out]
        batches[j:j + 1] = [big[: len(big) // 2], big[len(big) // 2:]]
    return batches


def padding_efficiency(batches: Sequence[Sequence[int]], src_lens: Sequence[int] | np.ndarray,
                       tgt_lens: Sequence[int] | np.ndarray) -> float:
    """Real tokens / all tokens of the padded (source + target) batches; 1.0 means no padding."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    real = padded = 0
    for b in batches:
        s, t = src_lens[list(b)], tgt_lens[list(b)]
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return real / padded if padded else 1.0


def random_batches(n: int, sizes: Sequence[int], seed: int = 0) -> list[list[int]]:
    """Random batches with the given sentence counts (the baseline for `padding_efficiency`)."""
    perm = np.random.default_rng(seed).permutation(n).tolist()
    out, start = [], 0
    for size in sizes:
        out.append(perm[start:start + size])
        start += size
    return out



def keep_within(ids: Sequence[int], room: int, keep: str = "start"):
    """At most `room` of `ids`: the first ("start") or the last ("end", e.g. the question of
    `context [SEP] question`). The one place a source is cut, in training and at inference."""
    if keep not in ("start", "end"):
        raise ValueError(f"keep must be 'start' or 'end', got {keep!r}")
    return ids[:room] if keep == "start" else ids[max(0, len(ids) - room):]


class LazyBatches(Sequence):
    """`n` batches made on access by `make(i)`: an epoch keeps only what it needs to make them
    (indices, windows), not every batch's tensors. What the trainer iterates for every task."""

    def __init__(self, n: int, make: Callable[[int], Any]):
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not -self.n <= i < self.n:
            raise IndexError(f"batch {i} of {self.n}")
        return self.make(i % self.n)


@dataclass
class Batch:
    """A padded batch. Shape: src (B, S); tgt_in, tgt_out (B, T) with T = longest target + 1.

    src: source ids + EOS (as `aiayn.decoding.encode_source` feeds them at inference), PAD at the right.
    tgt_in: BOS + y (decoder input, teacher forcing); tgt_out: y + EOS (labels); PAD at the right.
    n_src_tokens / n_tgt_tokens: non-pad tokens of src / tgt_out (normalise the loss by n_tgt_tokens).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_src_tokens: int
    n_tgt_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        move = lambda x: x.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.n_src_tokens, self.n_tgt_tokens)

    def pin_memory(self) -> "Batch":
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(),
                     self.n_src_tokens, self.n_tgt_tokens)


def collate(examples: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Batch:
    """Pad a list of (source ids, target ids) into a `Batch`."""
    if not examples:
        raise ValueError("collate needs at least one example")
    n = len(examples)
    s_len = max(len(s) for s, _ in examples) + 1
    t_len = max(len(t) for _, t in examples) + 1
    src = np.full((n, s_len), PAD_ID, dtype=np.int64)  # (B, S)
    tgt_in = np.full((n, t_len), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_out = np.full((n, t_len), PAD_ID, dtype=np.int64)  # (B, T)
    for b, (s, t) in enumerate(examples):
        src[b, : len(s)] = s
        src[b, len(s)] = EOS_ID
        tgt_in[b, 0] = BOS_ID
        tgt_in[b, 1 : len(t) + 1] = t
        tgt_out[b, : len(t)] = t
        tgt_out[b, len(t)] = EOS_ID
    n_src = sum(len(s) + 1 for s, _ in examples)
    n_tgt = sum(len(t) + 1 for _, t in examples)
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), n_src, n_tgt)
