"""Dynamic batching: requests that arrive together are decoded together.

Requests wait in one bounded queue. One worker thread owns the model, and the event loop only
enqueues and awaits, so it never blocks on the model. The worker batches in one of two ways:

    continuous   (where the model offers a `session`: beam search on aiayn's own Transformer)
                 requests join the running search at its next step, up to `max_batch` texts in
                 flight, and are answered as soon as their texts end (`ContinuousBeamSearch`);
                 it takes them in arrival order, and a request with other decoding options waits
                 until the running ones have drained
    whole calls  (everything else: greedy, sampling, attention, the CTranslate2 backend) the
                 oldest request and the requests with the same options that arrive within
                 `max_wait_ms` of it, up to `max_batch` texts, decoded in one `run` call

    full queue   `QueueFull` at once (the server answers 503 with Retry-After): memory stays bounded
    timeout      a request that waits longer than `timeout_s` gets `asyncio.TimeoutError` (504);
                 if it is still queued it is dropped, so no work is done for nobody
    failure      a batch that raises is retried one request at a time, so one bad request
                 fails alone and never the others batched with it (a continuous step that
                 raises ends the session, and its requests are retried that way)
    shutdown     `close()` stops taking requests and lets the worker finish what is queued
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds `max_queue` requests already."""


@dataclass(frozen=True)
class BatchConfig:
    max_batch: int = 32  # texts decoded together
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for company (whole calls)
    max_queue: int = 256  # requests waiting; beyond this, 503
    timeout_s: float = 60.0  # per request, queueing included

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_queue < 1 or self.max_wait_ms < 0 or self.timeout_s <= 0:
            raise ValueError(f"invalid batching settings: {self}")


@dataclass
class _Request:
    texts: list[str]
    options: Hashable  # requests batch together only when these are equal
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)
    cancelled: bool = False


class Stats:
    """Counters for /metrics: requests, errors, batch sizes, latencies (the last 10,000)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.texts = self.rejected = self.timeouts = self.errors = self.batches = 0
        self.steps = self.step_texts = 0  # continuous batching: decoding steps, and texts in flight summed over them
        self.batch_sizes: collections.Counter = collections.Counter()
        self.latencies: collections.deque = collections.deque(maxlen=10_000)

    def snapshot(self, queue_length: int) -> dict[str, Any]:
        with self.lock:
            ordered = sorted(self.latencies)
            pct = lambda q: round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else None  # noqa: E731
            return {"requests": self.requests, "texts": self.texts, "rejected_queue_full": self.rejected,
                    "timeouts": self.timeouts, "errors": self.errors, "batches": self.batches,
                    "batch_sizes": dict(sorted(self.batch_sizes.items())), "queue_length": queue_length,
                    "continuous_steps": self.steps, "continuous_texts_in_flight": self.step_texts,
                    "latency_ms": {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99)}}


class DynamicBatcher:
    """`await batcher.submit(texts, options)` -> `run(texts, options)`'s outputs for these texts.

    `run(texts, options) -> list` is called in the worker thread with the texts of one or more
    requests (in order) and must return one output per text. `session(options)`, if given,
    returns a continuous session for these options, or None: `add(request, texts)` between
    steps, `step() -> [(request, outputs)]` for the requests that are complete, and `len()`
    the requests it has not answered yet (`aiayn.decoding.translator.ContinuousTranslation`).
    """

    def __init__(self, run: Callable[[list[str], Any], Sequence[Any]], config: BatchConfig = BatchConfig(),
                 session: Callable[[Any], Any] | None = None):
        self.run, self.config, self.session = run, config, session
        self.queue: collections.deque[_Request] = collections.deque()
        self.cond = threading.Condition()
        self.stats = Stats()
        self.closed = False
        self.worker = threading.Thread(target=self._work, name="aiayn-batcher", daemon=True)
        self.worker.start()

    async def submit(self, texts: list[str], options: Hashable = None) -> list[Any]:
        loop = asyncio.get_running_loop()
        request = _Request(list(texts), options, loop.create_future(), loop)
        with self.cond:
            if self.closed:
                raise QueueFull("the server is shutting down")
            if len(self.queue) >= self.config.max_queue:
                with self.stats.lock:
                    self.stats.rejected += 1
                raise QueueFull(f"{len(self.queue)} requests are waiting")
            self.queue.append(request)
            self.cond.notify()
        try:
            return await asyncio.wait_for(asyncio.shield(request.future), self.config.timeout_s)
        except asyncio.TimeoutError:
            request.cancelled = True  # still queued: the worker skips it
            with self.stats.lock:
                self.stats.timeouts += 1
            raise
        finally:
            with self.stats.lock:
                self.stats.requests += 1
                self.stats.texts += len(request.texts)
                self.stats.latencies.append(time.monotonic() - request.enqueued)

    @property
    def queue_length(self) -> int:
        return len(self.queue)

    def close(self, wait_s: float = 30.0) -> None:
        """Take no more requests; the worker finishes the queued ones, then stops."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.worker.join(wait_s)

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            head = self._wait_for_work()
            if head is None:
                return
            batching = self.session is not None and self.config.max_batch > 1  # max_batch 1: batching off
            session = self.session(head.options) if batching else None
            if session is not None:
                self._drive(session, head.options)
                continue
            batch = self._next_batch()
            if batch is not None:
                self._decode(batch)

    def _wait_for_work(self) -> _Request | None:
        """The oldest live request (left in the queue), or None once closed and drained."""
        with self.cond:
            while True:
                while self.queue and self.queue[0].cancelled:
                    self.queue.popleft()
                if self.queue:
                    return self.queue[0]
                if self.closed:
                    return None
                self.cond.wait()

    def _drive(self, session, options: Hashable) -> None:
        """Step `session` until it has answered every request it took. Before each step it takes,
        in arrival order, the queued requests with these options that fit in `max_batch` texts."""
        in_flight: dict[int, _Request] = {}
        texts = 0  # in flight
        while True:
            joining = self._admit(options, self.config.max_batch - texts, first=not in_flight)
            for r in joining:
                try:
                    session.add(id(r), r.texts)
                except Exception:  # noqa: BLE001  this request alone fails
                    self._decode([r])
                    continue
                in_flight[id(r)] = r
                texts += len(r.texts)
            if not in_flight:
                return
            try:
                done = session.step()
            except Exception:  # noqa: BLE001  retried one request at a time, as whole calls are
                log.exception("continuous decoding failed; retrying its %d requests one by one", len(in_flight))
                for r in in_flight.values():
                    self._decode([r])
                return
            with self.stats.lock:
                self.stats.steps += 1
                self.stats.step_texts += texts
            for key, outputs in done:
                r = in_flight.pop(key)
                texts -= len(r.texts)
                _deliver(r, result=outputs)

    def _admit(self, options: Hashable, room: int, first: bool) -> list[_Request]:
        """Queued requests to join a running session: from the head, while they have `options`
        and fit in `room` texts (the first request of a session always fits)."""
        taken: list[_Request] = []
        with self.cond:
            while self.queue:
                r = self.queue[0]
                if r.cancelled:
                    self.queue.popleft()
                    continue
                if r.options != options or (len(r.texts) > room and not (first and not taken)):
                    break
                taken.append(self.queue.popleft())
                room -= len(r.texts)
        return taken

    def _next_batch(self) -> list[_Request] | None:
        """The oldest live request and the same-option requests that join it within max_wait_ms."""
        with self.cond:  # a re-entrant lock: _wait_for_work takes it again
            if self._wait_for_work() is None:
                return None
            first = self.queue.popleft()
            batch, n = [first], len(first.texts)
            deadline = first.enqueued + self.config.max_wait_ms / 1000
            while n < self.config.max_batch:
                joined = self._take_matching(first.options, self.config.max_batch - n)
                if joined is not None:
                    batch.append(joined)
                    n += len(joined.texts)
                    continue
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    break
                self.cond.wait(left)
            return batch

    def _take_matching(self, options: Hashable, room: int) -> _Request | None:
        for i, r in enumerate(self.queue):
            if not r.cancelled and r.options == options and len(r.texts) <= room:
                del self.queue[i]
                return r
        return None

    def _decode(self, batch: list[_Request]) -> None:
        texts = [t for r in batch for t in r.texts]
        with self.stats.lock:
            self.stats.batches += 1
            self.stats.batch_sizes[len(texts)] += 1
        try:
            outputs = list(self.run(texts, batch[0].options))
        except Exception:  # noqa: BLE001  one request's bad input must not fail the others: retry alone
            if len(batch) > 1:
                for r in batch:
                    self._decode([r])
                return
            log.exception("decoding failed")
            with self.stats.lock:
                self.stats.errors += 1
            _deliver(batch[0], error=RuntimeError("decoding failed"))
            return
        start = 0
        for r in batch:
            _deliver(r, result=outputs[start:start + len(r.texts)])
            start += len(r.texts)


def _deliver(request: _Request, result: Any = None, error: BaseException | None = None) -> None:
    def settle() -> None:
        if request.future.done():
            return
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(result)

    try:
        request.loop.call_soon_threadsafe(settle)
    except RuntimeError:  # its event loop has closed: nobody waits for this answer any more
        pass
