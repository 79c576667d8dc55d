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
                 raises ends the session, and its requests are retried that way); a decoder
                 that is gone (`Unavailable`: its worker process died) fails every request it
                 held at once, with no retry, and the queued ones wait for its successor
    cancelled    a request whose client went away (its awaiting task cancelled) or whose timeout
                 passed is marked; queued, it is dropped; in a running continuous search its
                 sentences leave at the next step (`session.cancel`), and a stream stops at its
                 next piece; `Stats.cancelled` counts the texts dropped while being decoded
    streams      `stream(text, options)` decodes one text alone through `stream(text, options)`,
                 handing each piece to the event loop as it comes
    shutdown     `drain()` (at SIGTERM) takes nothing more, and a request that its timeout runs out on (one
                 being decoded: `DRAIN_EXTRA_S` later) gets a 503, not a 504; `close()` stops taking
                 requests and lets the worker finish what is queued
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Hashable, Iterator, Sequence

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds `max_queue` requests already."""


DRAIN_EXTRA_S = 3.0  # shutting down: how long past its timeout a request being decoded may still finish


class Unavailable(Exception):
    """The decoder is gone (e.g. its worker process died): the requests it held fail with this."""


class NotStarted(Unavailable):
    """A new decoder could not be started (its model files changed under the server, say): the request
    that asked for it is answered unavailable, and the next request tries again."""


@dataclass(frozen=True)
class BatchConfig:
    max_batch: int = 32  # texts decoded together
    max_wait_ms: float = 10.0  # how long the first request of a batch waits for company (whole calls)
    max_queue: int = 256  # requests waiting; beyond this, 503
    timeout_s: float = 60.0  # per request, queueing included
    worker: str = "process"  # where the model decodes: a worker "process" of its own, or a "thread" of the server's

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_queue < 1:
            raise ValueError(f"max_batch and max_queue must be at least 1: {self}")
        if not 0 <= self.max_wait_ms < math.inf or not 0 < self.timeout_s < math.inf:  # NaN fails too
            raise ValueError(f"max_wait_ms must be a finite number >= 0 and timeout_s a finite number > 0: {self}")
        if self.worker not in ("process", "thread"):
            raise ValueError(f"worker must be 'process' or 'thread', got {self.worker!r}")


@dataclass
class _Request:
    texts: list[str]
    options: Hashable  # requests batch together only when these are equal
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.monotonic)
    cancelled: str = ""  # why nobody waits for the answer any more: "timeout" | "disconnect"; "" = live
    pieces: asyncio.Queue | None = None  # a stream's ("piece", text), then ("end", None) or ("error", exception)


CANCEL_REASONS = ("timeout", "disconnect")


class Stats:
    """Counters for /metrics: requests, errors, batch sizes, latencies (the last 10,000)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.texts = self.rejected = self.timeouts = self.errors = self.batches = 0
        self.steps = self.step_texts = 0  # continuous batching: decoding steps, and texts in flight summed over them
        self.in_flight = self.streams = self.unavailable = 0  # texts being decoded now; streamed requests; 503s
        self.cancelled: collections.Counter = collections.Counter()  # reason -> texts dropped while being decoded
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
                    "texts_in_flight": self.in_flight, "streams": self.streams,
                    "cancelled_texts": {reason: self.cancelled[reason] for reason in CANCEL_REASONS},
                    "unavailable": self.unavailable,
                    "latency_ms": {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99)}}


class DynamicBatcher:
    """`await batcher.submit(texts, options)` -> `run(texts, options)`'s outputs for these texts.

    `run(texts, options) -> list` is called in the worker thread with the texts of one or more
    requests (in order) and must return one output per text. `session(options)`, if given,
    returns a continuous session for these options, or None: `add(request, texts)` between
    steps, `step() -> [(request, outputs)]` for the requests that are complete, and `len()`
    the requests it has not answered yet (`aiayn.decoding.translator.ContinuousTranslation`), and
    `cancel(request) -> texts dropped`. `stream(text, options)`, if given, returns an iterator of
    the pieces of one text's output (`Pipeline.stream`).
    """

    def __init__(self, run: Callable[[list[str], Any], Sequence[Any]], config: BatchConfig = BatchConfig(),
                 session: Callable[[Any], Any] | None = None,
                 stream: Callable[[str, Any], Iterator[str]] | None = None):
        self.run, self.config, self.session, self.stream_run = run, config, session, stream
        self.queue: collections.deque[_Request] = collections.deque()
        self.cond = threading.Condition()
        self.stats = Stats()
        self.closed = False
        self.worker = threading.Thread(target=self._work, name="aiayn-batcher", daemon=True)
        self.worker.start()

    async def submit(self, texts: list[str], options: Hashable = None) -> list[Any]:
        request = self._enqueue(texts, options)
        try:
            return await asyncio.wait_for(asyncio.shield(request.future), self.config.timeout_s)
        except asyncio.TimeoutError:
            return await self._timed_out(request)
        except asyncio.CancelledError:  # the client went away
            self._cancel(request, "disconnect")
            raise
        finally:
            self._count(request)

    async def stream(self, text: str, options: Hashable = None) -> AsyncIterator[str]:
        """The pieces of `text`'s output as the worker decodes them; the timeout covers the whole stream."""
        if self.stream_run is None:
            raise RuntimeError("this batcher has no stream function")
        request = self._enqueue([text], options, stream=True)
        deadline = request.enqueued + self.config.timeout_s
        try:
            while True:
                kind, value = await asyncio.wait_for(request.pieces.get(), max(0.0, deadline - time.monotonic()))
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        except asyncio.TimeoutError:
            self._cancel(request, "timeout")
            if self.closed:
                raise QueueFull("the server is shutting down") from None
            raise
        except (asyncio.CancelledError, GeneratorExit):  # the client went away, or stopped reading
            self._cancel(request, "disconnect")
            raise
        finally:
            self._count(request)

    def _enqueue(self, texts: list[str], options: Hashable, stream: bool = False) -> _Request:
        loop = asyncio.get_running_loop()
        request = _Request(list(texts), options, loop.create_future(), loop, pieces=asyncio.Queue() if stream else None)
        with self.cond:
            if self.closed:
                raise QueueFull("the server is shutting down")
            if len(self.queue) >= self.config.max_queue:
                with self.stats.lock:
                    self.stats.rejected += 1
                raise QueueFull(f"{len(self.queue)} requests are waiting")
            self.queue.append(request)
            self.cond.notify()
        return request

    def _cancel(self, request: _Request, reason: str) -> None:
        request.cancelled = reason
        if reason == "timeout":
            with self.stats.lock:
                self.stats.timeouts += 1

    def _count(self, request: _Request) -> None:
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.texts += len(request.texts)
            self.stats.latencies.append(time.monotonic() - request.enqueued)

    @property
    def queue_length(self) -> int:
        return len(self.queue)

    def drain(self) -> None:
        """Shutdown has begun: take no more requests (`QueueFull`: a 503 with Retry-After). The queue is still
        decoded; a request that waits out its timeout is answered 503 too, not 504 (`_timed_out`): the server
        left it. So every accepted request is answered within its timeout and `DRAIN_EXTRA_S`."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        log.warning("shutting down: %d queued request(s) decoded while their timeout allows, new ones refused",
                    len(self.queue))

    async def _timed_out(self, request: _Request):
        """A request that waited out its timeout: a 504 (asyncio.TimeoutError), or, while the server shuts down
        (`drain`), its answer if a decode that took it ends within `DRAIN_EXTRA_S`, else a 503 (`QueueFull`)."""
        with self.cond:
            taken = request not in self.queue
        if self.closed and taken:
            try:
                return await asyncio.wait_for(asyncio.shield(request.future), DRAIN_EXTRA_S)
            except asyncio.TimeoutError:
                pass
        self._cancel(request, "timeout")  # queued: the worker skips it; decoding: it leaves the search
        raise QueueFull("the server is shutting down") if self.closed else asyncio.TimeoutError()

    def close(self, wait_s: float = 30.0) -> None:
        """Take no more requests; the worker finishes the queued ones, then stops."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.worker.join(wait_s)

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        """The worker thread's loop: it must outlive any failure, or every later request waits out its timeout."""
        while True:
            head = self._wait_for_work()
            if head is None:
                return
            try:
                self._serve(head)
            except Exception as e:  # noqa: BLE001  a failure outside the per-request handlers
                log.exception("the batcher failed serving a request; it goes on with the next")
                self._fail_if_queued(head, e)

    def _fail_if_queued(self, request: _Request, error: Exception) -> None:
        """Answer `request` with `error` (a 503 for `Unavailable`, else a 500) if no step has taken it yet."""
        with self.cond:
            if request not in self.queue:
                return
            self.queue.remove(request)
        if isinstance(error, Unavailable):
            self._unavailable([request], error)
        else:
            self._failed(request)

    def _failed(self, request: _Request) -> None:
        """Answer `request` with a bare "decoding failed" (a 500; the log holds the traceback), and count it."""
        with self.stats.lock:
            self.stats.errors += 1
        if request.pieces is not None:
            _deliver_piece(request, ("error", RuntimeError("decoding failed")))
        else:
            _deliver(request, error=RuntimeError("decoding failed"))

    def _serve(self, head: _Request) -> None:
        """Serve the oldest live request `head`: alone (a stream), in a continuous-batching session, or in
        a batch of whole calls with the same options."""
        if head.pieces is not None:
            self._stream(self._pop(head))
            return
        batching = self.session is not None and self.config.max_batch > 1  # max_batch 1: batching off
        try:
            session = self.session(head.options) if batching else None
        except NotStarted as e:  # a 503 now: retried at once, it would fail again until the request timed out
            self._unavailable([self._pop(head)], e)
            return
        except Unavailable:
            return  # the decoder died before this request reached it: the next try starts its successor
        if session is not None:
            self._drive(session, head.options)
            return
        batch = self._next_batch(head)
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
        in arrival order, the queued requests with these options that fit in `max_batch` texts,
        and lets go of the requests nobody waits for any more."""
        in_flight: dict[int, _Request] = {}
        try:
            while True:
                self._drop_cancelled(session, in_flight)
                texts = sum(len(r.texts) for r in in_flight.values())
                for r in self._admit(options, self.config.max_batch - texts, first=not in_flight):
                    try:
                        session.add(id(r), r.texts)
                    except Unavailable:
                        in_flight[id(r)] = r
                        raise
                    except Exception:  # noqa: BLE001  this request alone fails
                        self._decode([r])
                        continue
                    in_flight[id(r)] = r
                    texts += len(r.texts)
                self._set_in_flight(texts)
                if not in_flight:
                    return
                try:
                    done = session.step()
                except Unavailable:
                    raise
                except Exception:  # noqa: BLE001  retried one request at a time, as whole calls are
                    log.exception("continuous decoding failed; retrying its %d requests one by one", len(in_flight))
                    for r in in_flight.values():
                        self._decode([r])
                    return
                with self.stats.lock:
                    self.stats.steps += 1
                    self.stats.step_texts += texts
                for key, outputs in done:
                    _deliver(in_flight.pop(key), result=outputs)
        except Unavailable as e:
            self._unavailable(list(in_flight.values()), e)
        finally:
            self._set_in_flight(0)

    def _drop_cancelled(self, session, in_flight: dict[int, _Request]) -> None:
        """Take the requests nobody waits for out of the running search, before its next step."""
        for key in [key for key, r in in_flight.items() if r.cancelled]:
            r = in_flight.pop(key)
            dropped = session.cancel(key)
            with self.stats.lock:
                self.stats.cancelled[r.cancelled] += dropped
            log.info("%d text(s) left the running search (%s)", dropped, r.cancelled)

    def _set_in_flight(self, texts: int) -> None:
        with self.stats.lock:
            self.stats.in_flight = texts

    def _unavailable(self, requests: list[_Request], error: BaseException) -> None:
        """Every request the gone decoder held fails with `Unavailable` (the server answers 503)."""
        log.error("the decoder is gone (%s): %d request(s) answered unavailable", error, len(requests))
        with self.stats.lock:
            self.stats.unavailable += len(requests)
        for r in requests:
            if r.pieces is not None:
                _deliver_piece(r, ("error", Unavailable(str(error))))
            else:
                _deliver(r, error=Unavailable(str(error)))

    def _pop(self, request: _Request) -> _Request:
        with self.cond:
            self.queue.remove(request)
        return request

    def _stream(self, r: _Request) -> None:
        """Decode the one text of a stream request, handing each piece over as it comes; stop at the
        first piece after the request was cancelled (nothing more is decoded for it)."""
        with self.stats.lock:
            self.stats.streams += 1
        self._set_in_flight(1)
        pieces = None
        try:
            pieces = self.stream_run(r.texts[0], r.options)
            for piece in pieces:
                if r.cancelled:
                    with self.stats.lock:
                        self.stats.cancelled[r.cancelled] += 1
                    log.info("a stream stopped (%s)", r.cancelled)
                    return
                _deliver_piece(r, ("piece", piece))
            _deliver_piece(r, ("end", None))
        except Unavailable as e:
            self._unavailable([r], e)
        except ValueError as e:  # a request the pipeline refuses (RequestError)
            _deliver_piece(r, ("error", e))
        except Exception:  # noqa: BLE001  it fails alone
            log.exception("streaming failed")
            self._failed(r)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # a generator stopped early: nothing more is decoded
            self._set_in_flight(0)

    def _admit(self, options: Hashable, room: int, first: bool) -> list[_Request]:
        """Queued requests to join a running session: from the head, while they are whole-call
        requests (not streams) with `options` that fit in `room` texts (the first of a session always fits)."""
        taken: list[_Request] = []
        with self.cond:
            while self.queue:
                r = self.queue[0]
                if r.cancelled:
                    self.queue.popleft()
                    continue
                if r.pieces is not None or r.options != options or (len(r.texts) > room and not (first and not taken)):
                    break  # a stream is decoded on its own, in its turn
                taken.append(self.queue.popleft())
                room -= len(r.texts)
        return taken

    def _next_batch(self, head: _Request) -> list[_Request] | None:
        """`head` and the same-option requests that join it within max_wait_ms; None if `head` has left
        the queue meanwhile (its client went while a session was looked for): the loop looks again."""
        with self.cond:
            if head.cancelled or head not in self.queue:
                return None
            self.queue.remove(head)
            first = head
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
            if not r.cancelled and r.pieces is None and r.options == options and len(r.texts) <= room:
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
        except Unavailable as e:
            self._unavailable(batch, e)
            return
        except Exception:  # noqa: BLE001  one request's bad input must not fail the others: retry alone
            if len(batch) > 1:
                for r in batch:
                    self._decode([r])
                return
            log.exception("decoding failed")
            self._failed(batch[0])
            return
        start = 0
        for r in batch:
            _deliver(r, result=outputs[start:start + len(r.texts)])
            start += len(r.texts)


def _deliver_piece(request: _Request, event: tuple) -> None:
    try:
        request.loop.call_soon_threadsafe(request.pieces.put_nowait, event)
    except RuntimeError:  # its event loop has closed
        pass


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
