"""The per-rank body of test_distributed (spawned processes import it by name)."""

import os

import torch

from aiayn.config import OptimConfig
from aiayn.models.transformer import Transformer
from aiayn.training.config import RunConfig
from aiayn.distributed import init_from_env, shutdown, wrap_ddp

from training_helpers import make_trainer, batches, tiny_config

OPTIM = OptimConfig(warmup_steps=4, clip_norm=1.0, lr_factor=0.1)  # lr ≈ 7e-3: Adam steps ~lr, keep rounding < 1e-6
K = 3


def shard(rank: int):
    return batches(K, 2 + rank, seed=10 + rank)  # ranks get different batch sizes and token counts


def run_config(update_freq: int) -> RunConfig:
    return RunConfig(max_updates=K, update_freq=update_freq, progress=False, log_every=1)


def _worker(rank: int, world: int, port: int, run_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    info = init_from_env("cpu")
    try:
        torch.manual_seed(0)
        model = Transformer(tiny_config(dropout=0.0))
        data = shard(rank)
        make_trainer(model, OPTIM, run_config(1), run_dir, lambda e: data, dist=info).fit()
    finally:
        shutdown()


def _unknown_best_metric_worker(rank: int, world: int, port: int, run_dir: str) -> None:
    """Both ranks must raise at the first validation (rank 0 alone raising would leave rank 1 waiting)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    info = init_from_env("cpu")
    try:
        run = RunConfig(max_updates=K, validate_every=1, best_metric="rouge", progress=False, log_every=1)
        valid = batches(1, 4, seed=9) if rank == 0 else None
        try:
            make_trainer(Transformer(tiny_config()), OPTIM, run, run_dir, lambda e: shard(rank), valid_data=valid,
                         dist=info).fit()
        except ValueError as e:
            with open(os.path.join(run_dir, f"rank{rank}.error"), "w") as f:
                f.write(str(e))
    finally:
        shutdown()


def _classify_loss_worker(rank: int, world: int, port: int, out: str) -> None:
    """The classify and MLM task losses through DistributedDataParallel (both ranks on the same batch,
    two backward steps), and on the bare model."""
    from aiayn.models.encoder_only import EncoderOnly, EncoderOnlyConfig
    from aiayn.tasks.classify import ClassifyTask, TextBatch
    from aiayn.tasks.mlm import MLMTask
    from aiayn.training.config import load_config

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    init_from_env("cpu")
    try:
        torch.manual_seed(0)
        model = EncoderOnly(EncoderOnlyConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                              n_classes=2, dropout=0.0))
        ddp = wrap_ddp(model, torch.device("cpu"), ClassifyTask.unused_parameters)  # as the trainer does
        cfg = load_config(None, ['task="classify"', 'model.type="encoder-only"', "train.max_updates=1"])
        tokens = torch.randint(5, 20, (3, 6), generator=torch.Generator().manual_seed(1))
        label_batch = TextBatch(tokens, torch.tensor([0, 1, 1]))
        mlm_batch = TextBatch(tokens, torch.where(tokens > 12, tokens, torch.zeros_like(tokens)))
        rows = []
        for task, batch in ((ClassifyTask(cfg), label_batch), (MLMTask(cfg), mlm_batch)):
            for _ in range(2):  # a second step: DDP checks that the first one's reduction finished
                losses = [task.loss(m, batch).loss for m in (ddp, model)]
                losses[0].backward()
            rows.append([float(x) for x in losses])
        if rank == 0:
            with open(out, "w") as f:
                f.write(repr(rows))
    finally:
        shutdown()
