"""`serve.worker`: the decoder process of a model directory."""

from pathlib import Path

import pytest

pytest.importorskip("setproctitle", reason="the serve extra installs setproctitle")

from aiayn.serve.worker import WorkerProcess  # noqa: E402
from tiny_models import tiny_model  # noqa: E402


def test_each_decoder_process_is_named_by_its_model_directory(tmp_path):
    """The forkserver's children all carried its command line: only /v1/metrics' worker_pid told them apart."""
    workers = [WorkerProcess(tiny_model(tmp_path / task, task), "cpu") for task in ("translation", "lm")]
    try:  # each has answered "ready" once its pipeline loaded, after it named itself
        names = [Path(f"/proc/{w.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip() for w in workers]
    finally:
        for w in workers:
            w.close()
    assert names == [f"aiayn decoder {tmp_path / 'translation'}", f"aiayn decoder {tmp_path / 'lm'}"]
