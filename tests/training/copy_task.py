"""The copy task, the learning check every encoder-decoder here must pass: sources of 2 to 6 random
tokens then EOS, targets equal to them; after training, greedy decoding of held-out sequences."""

import random

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding import greedy_search
from aiayn.tasks.loss import label_smoothed_loss


def _batch(rng: random.Random, n: int, vocab: int):
    """n random sequences -> (sequences, src, tgt_in, tgt_out), each tensor (n, 7), PAD-padded."""
    seqs = [[rng.randrange(4, vocab) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    src, tgt_in, tgt_out = (torch.zeros(n, 7, dtype=torch.long) for _ in range(3))
    for i, s in enumerate(seqs):
        src[i, : len(s) + 1] = torch.tensor(s + [EOS_ID])
        tgt_in[i, : len(s) + 1] = torch.tensor([BOS_ID] + s)
        tgt_out[i, : len(s) + 1] = torch.tensor(s + [EOS_ID])
    return seqs, src, tgt_in, tgt_out


def train_and_copy(model, vocab: int, steps: int, lr: float = 3e-3) -> tuple[list, list]:
    """Train `model` with Adam for `steps` updates of 32 sequences, then greedy-decode 100 held-out
    ones: (the sequences, the model's outputs)."""
    rng = random.Random(0)
    optim = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        _, src, tgt_in, tgt_out = _batch(rng, 32, vocab)
        sums = label_smoothed_loss(model(src, tgt_in), tgt_out, 0.0, PAD_ID)
        optim.zero_grad()
        (sums.loss / sums.n_tokens).backward()
        optim.step()
    seqs, src, _, _ = _batch(rng, 100, vocab)
    return seqs, greedy_search(model.eval(), src, 1.0, 2)
