"""Built-in synthetic tasks (copy, reverse, sort), deterministic from a seed.

They need nothing from outside, so the demo and the tests run offline. Examples are
text pairs of space-separated symbols, so they flow through the same tokenizer and
batching code as real corpora.
"""

from __future__ import annotations

from types import MappingProxyType

import random
from typing import Callable, Mapping

TASKS: Mapping[str, Callable[[list[str]], list[str]]] = MappingProxyType({
    "copy": lambda seq: list(seq),
    "reverse": lambda seq: seq[::-1],
    "sort": sorted,
})


def symbols(n_symbols: int) -> list[str]:
    """The task alphabet: 'a', 'b', ... then 'a1', 'b1', ... beyond 26."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [letters[i % 26] + (str(i // 26) if i >= 26 else "") for i in range(n_symbols)]


def synthetic_pairs(
    task: str, n: int, seed: int, n_symbols: int = 10, min_len: int = 3, max_len: int = 10,
) -> list[tuple[str, str]]:
    """n (source, target) pairs of the task, identical for identical arguments on any machine."""
    if task not in TASKS:
        raise ValueError(f"unknown synthetic task {task!r}; choose from {', '.join(TASKS)}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    alphabet, rng, fn = symbols(n_symbols), random.Random(seed), TASKS[task]
    pairs = []
    for _ in range(n):
        seq = [rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((" ".join(seq), " ".join(fn(seq))))
    return pairs
