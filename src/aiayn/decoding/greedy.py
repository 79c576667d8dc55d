"""Batched greedy decoding with the key/value cache."""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.model import Transformer


def max_output_length(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """a · |src| + b per sentence (§6.1: |src| + 50). (B,) -> (B,) long."""
    return (a * src_lengths.float() + b).long()


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[int]]:
    """argmax decoding of a padded batch src (B, S). Returns token ids without BOS/EOS.

    Each sentence stops at EOS or at its own maximum length, so results do not depend
    on what else is in the batch.
    """
    cfg = model.config
    enc = model.encode(src)
    limits = max_output_length(enc.src_mask.sum(1), max_len_a, max_len_b)  # (B,)
    steps = int(limits.max())
    cache = model.init_cache(enc, capacity=steps + 1)
    tokens = torch.full((src.shape[0], 1), cfg.bos_id, dtype=torch.long, device=src.device)
    out = torch.full((src.shape[0], steps), cfg.pad_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for t in range(steps):
        logits = model.decode(tokens, cache).logits[:, -1]  # (B, V)
        tokens = logits.argmax(-1, keepdim=True)  # (B, 1)
        done |= t >= limits  # this sentence reached its own limit
        out[:, t] = tokens.squeeze(1).masked_fill(done, cfg.pad_id)
        done |= tokens.squeeze(1) == cfg.eos_id
        if bool(done.all()):
            break
    return [[i for i in row if i not in (cfg.pad_id, cfg.eos_id)] for row in out.tolist()]
