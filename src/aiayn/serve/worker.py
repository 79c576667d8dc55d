"""Where a served model decodes: in the HTTP process (`PipelineRunner`, called by the batcher's
thread) or in a worker process of its own (`WorkerProcess`), so that the event loop, which parses
requests and writes answers, no longer shares a GIL with the decoder.

Both offer what `DynamicBatcher` calls: `run(items, options)`, `session(options)` (a continuous
session with `add`, `step` and `cancel`, or None) and `stream(item, options)`. The batcher, its
queue, timeouts and cancellation stay in the HTTP process; the worker holds the pipeline and the
running search, and does one thing at a time, as the batcher's one thread asks: a `run`, an `add`,
a `step`, the next piece of a stream. So the continuous search runs exactly as it does in-process
(each sentence gets the search it would get alone), one message each way per step.

Why `multiprocessing`, started by "forkserver", over a `Pipe`: it is the standard library (no
dependency: Ray or Celery bring schedulers and brokers that one model on one machine does not
need), a `Pipe` sends the pickled messages without the feeder thread a `multiprocessing.Queue`
has, and its peer's death is seen at once by waiting on the connection and the process's
`sentinel` together (`connection.wait`). "fork" would copy a process that runs uvicorn's threads
and torch's OpenMP pool, neither of which survives a fork safely; "spawn" re-imports torch for
every (re)start; the fork server imports this module, and with it torch, once, and forks each
worker from that clean process. (This sets the preload of the process-wide fork server, which
only makes it import this module up front.)

The worker ignores SIGINT and SIGTERM: the server drains on them and then stops the worker
itself (`close`), and the worker ends when its pipe closes (the server gone). A worker that dies
is seen by the call waiting on it, which raises `Unavailable` (the batcher answers the requests
it held 503); the next call starts a new worker (`restarts` counts them).
"""

from __future__ import annotations

import logging
import signal
import threading
import weakref
from pathlib import Path
from typing import Any, Hashable, Iterator

import torch  # noqa: F401  imported here so that the fork server imports it once for every worker

from aiayn.serve.batcher import NotStarted, Unavailable
from aiayn.tasks import RequestError, load_pipeline

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # a worker that has not loaded its model by then is killed (and the start fails)


class PipelineRunner:
    """A loaded pipeline as the batcher calls it (options as a sorted tuple of (name, value))."""

    start_failed = None  # it never restarts (see `WorkerProcess.start_failed`)

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def run(self, items: list, options: Hashable) -> list:
        return self.pipeline.run(items, **dict(options))

    def session(self, options: Hashable):
        return self.pipeline.session(**dict(options))

    def stream(self, item, options: Hashable) -> Iterator[str]:
        return self.pipeline.stream(item, **dict(options))


class WorkerProcess:
    """The pipeline of `model_dir` in a worker process; the same calls as `PipelineRunner`, each a
    message to the worker and its answer. Called from one thread only (the batcher's)."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", backend: str = "native",
                 options: dict | None = None):
        self.args = (str(model_dir), device, backend, dict(options or {}))
        self.conn = self.process = None
        self.restarts = 0
        self.start_failed: str | None = None  # why the last restart failed, until one succeeds (/health says so)
        self.lock = threading.RLock()  # `close` may come from another thread than the calls
        self._start()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def run(self, items: list, options: Hashable) -> list:
        return self._call("run", items, options)

    def session(self, options: Hashable):
        return RemoteSession(self) if self._call("session", options) else None

    def stream(self, item, options: Hashable) -> Iterator[str]:
        self._call("stream", item, options)
        try:
            while True:
                piece = self._call("next")
                if piece is None:
                    return
                yield piece
        finally:
            if self.process is not None:
                self._call("close_stream")

    def close(self, wait_s: float = 10.0) -> None:
        """Stop the worker (after the call it is answering, if that ends within `wait_s`; else it is killed)."""
        if not self.lock.acquire(timeout=wait_s):  # a call still waits on the worker: end it
            process = self.process
            if process is not None:
                log.error("the decoder process %d did not finish its call within %g s: killed", process.pid, wait_s)
                process.kill()
            return
        try:
            process, conn, self.process = self.process, self.conn, None
        finally:
            self.lock.release()
        if process is None:
            return
        try:
            conn.send(("stop",))
        except OSError:
            pass
        process.join(wait_s)
        if process.is_alive():
            process.kill()
            process.join()
        conn.close()

    # -- the messages ---------------------------------------------------------------------------
    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        conn, child = ctx.Pipe()
        process = ctx.Process(target=serve_pipeline, args=(child, *self.args), name="aiayn-decoder", daemon=True)
        process.start()
        # A worker ignores SIGTERM (the server drains, then stops it), so multiprocessing's exit hook, which
        # terminates daemonic children and joins them, would wait forever for one never closed (an app built
        # but never served): kill it first (a finalizer runs at exit before that hook, and when this object goes).
        weakref.finalize(self, _kill, process)
        child.close()
        self.conn, self.process = conn, process
        if not conn.poll(START_TIMEOUT_S) and process.is_alive():  # a worker stuck loading must not hang the server
            process.kill()
        kind, value = self._receive()
        if kind != "ready":
            self.close()
            raise RuntimeError(f"the decoder process could not load {self.args[0]}: {value[0]}")
        log.info("decoder process %d serves %s", process.pid, self.args[0])

    def _call(self, *message) -> Any:
        with self.lock:
            if self.process is None:
                self.restarts += 1
                log.warning("starting a new decoder process (restart %d)", self.restarts)
                try:
                    self._start()
                except RuntimeError as e:  # the files changed under the server, say: a 503, and the next call tries again
                    self.start_failed = str(e)
                    raise NotStarted(str(e)) from None
                self.start_failed = None
            try:
                self.conn.send(message)
            except OSError:
                self._died()
            kind, value = self._receive()
        if kind == "error":
            text, status = value
            raise RequestError(text, status) if status is not None else RuntimeError(text)
        return value

    def _receive(self) -> tuple:
        from multiprocessing.connection import wait

        ready = wait([self.conn, self.process.sentinel])
        if self.conn not in ready and _running(self.process.pid):
            # the sentinel is the fork server's, which a SIGTERM to the whole process group (systemd, kill -TERM
            # -PGID) ends while the decoder, ignoring it, drains: its pipe still says when it ends (EOF)
            ready = wait([self.conn])
        if self.conn in ready:
            try:
                return self.conn.recv()
            except (EOFError, OSError):
                pass
        self._died()

    def _died(self) -> None:
        process, self.process = self.process, None
        process.join(1)
        self.conn.close()
        raise Unavailable(f"the decoder process {process.pid} died (exit code {process.exitcode})")


class RemoteSession:
    """A continuous session living in the worker: each call is a message."""

    def __init__(self, worker: WorkerProcess):
        self.worker = worker

    def add(self, request, texts) -> None:
        self.worker._call("add", request, list(texts))

    def step(self) -> list:
        return self.worker._call("step")

    def cancel(self, request) -> int:
        return self.worker._call("cancel", request)


def _running(pid: int) -> bool:
    """Whether process `pid` exists (a zombie too: its pipe then reads EOF, which `_receive` handles)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, another user's
    return True


def _kill(process) -> None:
    if process.is_alive():
        process.kill()
        process.join(5)


def name_process(title: str) -> None:
    """What `ps` and `top` show for this process: the forkserver's children all carry its command line, so each
    decoder is named by its model directory (setproctitle, of the serve extra; without it, the names stay)."""
    try:
        from setproctitle import setproctitle  # optional: the serve extra installs it
    except ImportError:
        return
    setproctitle(title)


def serve_pipeline(conn, model_dir: str, device: str, backend: str, options: dict | None = None) -> None:
    """The worker process: load the pipeline, then answer each message with ("ok", value) or
    ("error", (message, RequestError status or None)) until "stop" or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server drains, then stops this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name_process(f"aiayn decoder {model_dir}")
    try:
        runner = PipelineRunner(load_pipeline(model_dir, device=device, backend=backend, **(options or {})))
    except Exception as e:  # noqa: BLE001  told to the server, which refuses to start
        conn.send(("error", (f"{type(e).__name__}: {e}", None)))
        return
    conn.send(("ready", None))
    session = stream = None
    while True:
        try:
            op, *args = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if op == "stop":
            return
        try:
            if op == "run":
                value = runner.run(*args)
            elif op == "session":
                session = runner.session(*args)
                value = session is not None
            elif op == "stream":
                stream, value = iter(runner.stream(*args)), None
            elif op == "next":
                value = next(stream, None)
            elif op == "close_stream":
                getattr(stream, "close", lambda: None)()
                stream = value = None
            else:  # add, step, cancel
                value = getattr(session, op)(*args)
            conn.send(("ok", value))
        except Exception as e:  # noqa: BLE001  the request fails, the worker goes on
            conn.send(("error", (str(e), e.status if isinstance(e, RequestError) else None)))
