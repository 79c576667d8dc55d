"""DDP with gloo on CPU: 2 ranks with 1 micro-batch each per update == 1 process with both."""

import ast
import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

from aiayn.models.transformer import Transformer

# the worker lives in an importable module: spawned children cannot import this test file
from ddp_worker import OPTIM, _classify_loss_worker, _unknown_best_metric_worker, _worker, run_config, shard
from training_helpers import make_trainer, tiny_config

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_equal_one_process_on_the_combined_batches(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path / "ddp")), nprocs=2, join=True)
    ddp = Transformer.from_pretrained(tmp_path / "ddp" / "model")

    torch.manual_seed(0)
    single = Transformer(tiny_config(dropout=0.0))
    a, b = shard(0), shard(1)
    combined = [x for pair in zip(a, b) for x in pair]  # update k = [rank 0's batch k, rank 1's batch k]
    make_trainer(single, OPTIM, run_config(2), tmp_path / "single", lambda e: combined).fit()
    D = single.config.d_model
    for (name, p), q in zip(single.named_parameters(), ddp.parameters()):
        if name.endswith("in_proj.bias"):
            # The key bias has an exactly zero gradient (softmax ignores a constant shift of
            # the scores), so Adam turns its ~1e-10 rounding noise into ±lr steps: skip it.
            p, q = torch.cat([p[:D], p[2 * D:]]), torch.cat([q[:D], q[2 * D:]])
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=name)
    assert (tmp_path / "ddp" / "metrics.jsonl").is_file()  # written by rank 0 only


def test_the_encoder_only_task_losses_run_through_distributed_data_parallel(tmp_path):
    """DDP wraps forward only: the classify and MLM losses must reach their heads through it."""
    out = tmp_path / "losses"
    mp.spawn(_classify_loss_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    for through_ddp, bare in ast.literal_eval(out.read_text()):
        assert through_ddp == bare > 0


def test_an_unknown_best_metric_stops_every_rank(tmp_path):
    """Only rank 0 validates; the error must reach rank 1 too instead of leaving it in a collective."""
    tmp_path.joinpath("run").mkdir()
    context = mp.start_processes(_unknown_best_metric_worker, args=(2, _free_port(), str(tmp_path / "run")),
                                 nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 180
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            raise AssertionError("a rank hung on an unknown train.best_metric")
    for rank in (0, 1):
        assert "best_metric = 'rouge'" in (tmp_path / "run" / f"rank{rank}.error").read_text()


@pytest.mark.slow
def test_a_run_resumed_under_torchrun_continues_as_the_uninterrupted_one(tmp_path):
    """Resuming asks every rank whether the run is finished (a collective); only rank 0 once asked,
    and the ranks' next collectives crossed. A finished run resumed again does nothing, on every rank."""
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    recipe = Path(__file__).resolve().parents[2] / "src" / "aiayn" / "recipes" / "demo.toml"
    common = ["--set", "train.cooldown=0", "--set", "data.n_train=2000"]

    def torchrun(*args):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), "-m", "aiayn", "train", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]

    torchrun(str(recipe), *common, "--set", "train.max_updates=8", "--run-dir", str(tmp_path / "whole"))
    torchrun(str(recipe), *common, "--set", "train.max_updates=4", "--run-dir", str(tmp_path / "half"))
    torchrun("--resume", str(tmp_path / "half"), "--set", "train.max_updates=8")
    torchrun("--resume", str(tmp_path / "half"), "--set", "train.max_updates=8")  # finished: nothing to do
    whole, resumed = (load_file(tmp_path / run / "model" / "model.safetensors") for run in ("whole", "half"))
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)


@pytest.mark.parametrize("device_type, expected", [("cpu", {"cpu": "gloo"}), ("cuda", {"cpu": "gloo", "cuda": "nccl"})])
def test_the_trainers_cpu_numbers_have_a_backend_on_every_device(device_type, expected):
    """`all_reduce` and `gather_objects` reduce CPU tensors: the group serves them on GPUs too (NCCL serves
    CUDA tensors only; a plain "nccl" group fails at the trainer's first all_reduce), with gradients on NCCL."""
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    from aiayn.distributed import process_group_backend

    served = BackendConfig(Backend(process_group_backend(device_type))).get_device_backend_map()
    assert {device: served[device] for device in expected} == expected
