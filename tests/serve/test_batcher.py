"""The dynamic batcher: batching, isolation of a failing request, the queue bound, timeouts.

No test here depends on how fast a thread runs: where an outcome hangs on the order of the worker
and the event loop, events fix that order (`started`, `gate`, `before_step`), and a wait that
bounds a batch is long enough that only a full batch ends it."""

import asyncio
import re
import threading

import pytest

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull
import time

from aiayn.serve.app import create_app
from serve_helpers import BEAM, LIMITS, LONG, raw_post, wait_for


def upper(texts, options):
    if any(t == "boom" for t in texts):
        raise ValueError("bad text")
    return [t.upper() + (options or "") for t in texts]


def run(coroutine):
    return asyncio.run(coroutine)


def test_concurrent_requests_are_batched_and_answered_in_order():
    # the first request waits for company until 8 texts have come (a minute: only a full batch ends it)
    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, max_wait_ms=60_000))

    async def main():
        return await asyncio.gather(*(batcher.submit([f"t{i}", f"u{i}"]) for i in range(4)))

    assert run(main()) == [[f"T{i}", f"U{i}"] for i in range(4)]
    stats = batcher.stats.snapshot(0)
    assert stats["batches"] == 1 and stats["batch_sizes"] == {8: 1}  # the four requests shared one decode call
    assert stats["requests"] == 4 and stats["texts"] == 8
    batcher.close()


def recording(calls: list):
    """`upper`, noting each call's (texts, options)."""
    return lambda texts, options: calls.append((list(texts), options)) or upper(texts, options)


def test_requests_with_other_options_are_not_mixed():
    calls: list = []  # a minute's wait: each options' two requests make a full batch, nothing else ends one
    batcher = DynamicBatcher(recording(calls), BatchConfig(max_batch=2, max_wait_ms=60_000))

    async def main():
        return await asyncio.gather(*(batcher.submit([t], o) for t, o in zip("abcd", "!?!?")))

    assert run(main()) == [["A!"], ["B?"], ["C!"], ["D?"]]
    assert sorted(calls) == [(["a", "c"], "!"), (["b", "d"], "?")]  # batched, and by their options
    batcher.close()


def test_a_failing_request_fails_alone():
    calls: list = []  # the three fill a batch (a minute's wait: only a full one ends it), then one by one
    batcher = DynamicBatcher(recording(calls), BatchConfig(max_batch=3, max_wait_ms=60_000))

    async def main():
        return await asyncio.gather(batcher.submit(["ok"]), batcher.submit(["boom"]), batcher.submit(["fine"]),
                                    return_exceptions=True)

    good, bad, fine = run(main())
    assert good == ["OK"] and fine == ["FINE"] and isinstance(bad, RuntimeError) and str(bad) == "decoding failed"  # no internals leak
    assert calls[0] == (["ok", "boom", "fine"], None)  # they shared a decode call, which failed as a whole
    assert batcher.stats.snapshot(0)["errors"] == 1
    batcher.close()


def test_a_full_queue_refuses_at_once_and_a_slow_request_times_out():
    started, release = threading.Event(), threading.Event()

    def slow(texts, options):  # holds the worker until the test is over: every request times out
        started.set()
        release.wait(60)
        return texts

    batcher = DynamicBatcher(slow, BatchConfig(max_batch=1, max_wait_ms=0, max_queue=2, timeout_s=0.2))

    async def main():
        first = asyncio.ensure_future(batcher.submit(["busy"]))
        assert await asyncio.to_thread(started.wait, 60)  # the worker has taken it: the queue is empty
        waiting = [asyncio.ensure_future(batcher.submit([f"w{i}"])) for i in range(2)]
        await asyncio.sleep(0)  # both run up to their wait: each has queued its request
        assert batcher.queue_length == 2
        with pytest.raises(QueueFull):
            await batcher.submit(["one too many"])
        results = await asyncio.gather(first, *waiting, return_exceptions=True)
        return results

    results = run(main())
    assert all(isinstance(r, asyncio.TimeoutError) for r in results)
    release.set()
    stats = batcher.stats.snapshot(batcher.queue_length)
    assert stats["rejected_queue_full"] == 1 and stats["timeouts"] == 3
    batcher.close()
    assert batcher.queue_length == 0  # timed-out requests were dropped, not decoded later


def test_close_finishes_the_queue_then_refuses():
    batcher = DynamicBatcher(upper, BatchConfig(max_batch=2, max_wait_ms=0))

    async def main():
        pending = [asyncio.ensure_future(batcher.submit([f"x{i}"])) for i in range(5)]
        await asyncio.sleep(0)
        closer = asyncio.get_running_loop().run_in_executor(None, batcher.close)
        done = await asyncio.gather(*pending)
        await closer
        with pytest.raises(QueueFull):
            await batcher.submit(["late"])
        return done

    assert run(main()) == [[f"X{i}"] for i in range(5)]


class CountdownSession:
    """A fake continuous session: text t ends after len(t) steps, as t.upper() + options.
    It records, per step, the first text of each request in flight. `before_step(n)`, if given,
    is called before step n (0, 1, ...): a test holds the worker there."""

    def __init__(self, options, log, fail_on=None, before_step=None):
        self.options, self.log, self.fail_on, self.before_step = options or "", log, fail_on, before_step
        self.left: dict = {}

    def __len__(self):
        return len(self.left)

    def add(self, request, texts):
        if self.fail_on in texts:
            raise ValueError("bad text")
        self.left[request] = (texts, max(len(t) for t in texts))

    def step(self):
        if self.before_step is not None:
            self.before_step(len(self.log))
        self.log.append({texts[0] for texts, _ in self.left.values()})
        if self.fail_on == "step" and len(self.left) > 1:
            raise RuntimeError("the step failed")
        done = []
        for request, (texts, n) in list(self.left.items()):
            if n <= 1:
                del self.left[request]
                done.append((request, [t.upper() + self.options for t in texts]))
            else:
                self.left[request] = (texts, n - 1)
        return done


def continuous(log, fail_on=None, gate=None, before_step=None, **config):
    """A batcher over `CountdownSession`s. With `gate`, the worker opens its first session only once
    the gate is set: the test queues all its requests first, so the first session sees them all."""
    def session(options):
        if gate is not None:
            assert gate.wait(60)
        return CountdownSession(options, log, fail_on, before_step)

    return DynamicBatcher(upper, BatchConfig(**config), session=session)


async def submit_all(batcher, gate, requests):
    """Queue every (texts, options) request, open `gate`, then gather the answers."""
    tasks = [asyncio.ensure_future(batcher.submit(texts, options)) for texts, options in requests]
    await asyncio.sleep(0)  # each task runs up to its wait: its request is queued
    gate.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


def test_continuous_requests_join_a_running_session_and_leave_when_done():
    log: list = []
    running, go = threading.Event(), threading.Event()

    def before_step(n):
        if n == 5:  # the long one has run 5 steps: it waits here until the short ones are queued
            running.set()
            assert go.wait(60)

    batcher = continuous(log, max_batch=8, before_step=before_step)

    async def main():
        long = asyncio.ensure_future(batcher.submit(["x" * 30]))
        assert await asyncio.to_thread(running.wait, 60)
        short = await submit_all(batcher, go, [([f"s{i}"], None) for i in range(3)])
        return short, await long

    short, long = run(main())
    assert short == [["S0"], ["S1"], ["S2"]] and long == ["X" * 30]
    # queued during step 5, they joined at step 6 and left after their 2 steps: no step was added for them
    assert [len(s) for s in log] == [1] * 6 + [4] * 2 + [1] * 22
    assert log[6] == {"x" * 30, "s0", "s1", "s2"} and log[-1] == {"x" * 30}
    assert batcher.stats.snapshot(0)["continuous_steps"] == len(log)
    batcher.close()


def test_continuous_keeps_options_apart_and_the_texts_in_flight_bounded():
    log: list = []
    gate = threading.Event()
    batcher = continuous(log, gate=gate, max_batch=2)
    requests = [([f"t{i}"], "!" if i % 2 else "?") for i in range(6)]
    assert run(submit_all(batcher, gate, requests)) == [[f"T{i}" + ("!" if i % 2 else "?")] for i in range(6)]
    # options alternate in the queue, so each request runs alone (its 2 steps), in arrival order
    assert log == [{f"t{i}"} for i in range(6) for _ in range(2)]
    batcher.close()

    log.clear()  # requests with the same options: they join each other, but never more than max_batch texts
    gate = threading.Event()
    batcher = continuous(log, gate=gate, max_batch=2)
    assert run(submit_all(batcher, gate, [([f"t{i}"], None) for i in range(6)])) == [[f"T{i}"] for i in range(6)]
    assert log == [{f"t{i}", f"t{i + 1}"} for i in (0, 2, 4) for _ in range(2)]
    batcher.close()


def test_continuous_failures_hit_only_the_bad_request():
    for fail_on in ("boom", "step"):  # a request that cannot join; a step that raises (retried one by one)
        log: list = []
        gate = threading.Event()  # all three are queued before the session opens: "step" fails with 3 in flight
        batcher = continuous(log, fail_on=fail_on, gate=gate, max_batch=8)
        good, bad, fine = run(submit_all(batcher, gate, [(["ok"], None), (["boom"], None), (["fine"], None)]))
        assert good == ["OK"] and fine == ["FINE"] and isinstance(bad, RuntimeError), fail_on
        batcher.close()


def test_a_stream_is_never_taken_into_a_waiting_batch():
    """A stream that comes while a whole-call request with the same options waits for company is
    decoded on its own, after it: taken into that batch, its answer would go to nobody and the
    stream would time out. The worker is held where it looks for a session (there is none: whole
    calls) until the stream is queued, so the batch is gathered with the stream already waiting."""
    looking, queued = threading.Event(), threading.Event()

    def session(options):
        looking.set()
        assert queued.wait(60)
        return None  # no continuous session: the head request gathers a batch of whole calls

    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, max_wait_ms=100, timeout_s=5), session=session,
                             stream=lambda text, options: iter(text.upper()))

    async def main():
        whole = asyncio.ensure_future(batcher.submit(["a"]))
        assert await asyncio.to_thread(looking.wait, 60)  # the worker holds "a", about to gather its batch
        stream = batcher.stream("bc")
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # the task runs up to its wait: the stream is queued
        assert batcher.queue_length == 2
        queued.set()
        return await whole, [await first] + [piece async for piece in stream]

    assert run(main()) == (["A"], ["B", "C"])
    stats = batcher.stats.snapshot(0)
    assert stats["batch_sizes"] == {1: 1} and stats["streams"] == 1 and stats["timeouts"] == 0
    batcher.close()


def test_the_worker_outlives_a_failure_outside_the_per_request_handlers():
    """Opening a session fails once (a decoder process that cannot restart, say): that request is answered
    with an error and the worker goes on, where it had ended and every later request timed out."""
    calls = []

    def session(options):
        calls.append(options)
        if len(calls) == 1:
            raise RuntimeError("the decoder process could not load the model")
        return CountdownSession(options, [])

    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, timeout_s=30), session=session)
    with pytest.raises(RuntimeError, match="decoding failed"):
        run(batcher.submit(["first"]))
    assert run(batcher.submit(["second"])) == ["SECOND"] and batcher.worker.is_alive()
    assert batcher.stats.snapshot(0)["errors"] == 1
    batcher.close()


def test_a_stream_queued_behind_a_request_that_left_is_streamed_not_batched():
    """The head request leaves (its timeout) while the worker looks for a session; the stream queued after it
    is then the oldest: it is streamed, where it had been taken into a batch of whole calls and hung."""
    opened, release = threading.Event(), threading.Event()

    def session(options):
        opened.set()
        assert release.wait(60)
        return None  # no continuous session for these options: whole calls

    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, timeout_s=1.0), session=session,
                             stream=lambda text, options: iter(text.upper()))

    async def main():
        whole = asyncio.ensure_future(batcher.submit(["a"]))
        assert await asyncio.to_thread(opened.wait, 60)
        with pytest.raises(TimeoutError):
            await whole
        stream = batcher.stream("bc")
        first = asyncio.ensure_future(stream.__anext__())  # queues the stream
        await asyncio.sleep(0)
        release.set()
        return [await first] + [piece async for piece in stream]

    assert run(main()) == ["B", "C"]
    assert batcher.stats.snapshot(0)["batches"] == 0 and batcher.stats.snapshot(0)["streams"] == 1
    batcher.close()


WAIT_RULE, TIMEOUT_RULE = "max_wait_ms must be a finite number >= 0", "timeout_s a finite number > 0"  # regexes
BATCH_RULE, QUEUE_RULE = r"max_batch\b[^:]*must be at least 1", "max_queue must be at least 1"


# the message states the rule naming the field, then ": " and the whole config, where the bad value shows
@pytest.mark.parametrize("settings,rule", [(dict(max_wait_ms=float("inf")), WAIT_RULE),
                                          (dict(max_wait_ms=-1.0), WAIT_RULE),
                                          (dict(timeout_s=float("nan")), TIMEOUT_RULE),
                                          (dict(timeout_s=0.0), TIMEOUT_RULE),
                                          (dict(max_batch=0), BATCH_RULE), (dict(max_queue=0), QUEUE_RULE)])
def test_batching_settings_must_be_finite_and_positive(settings, rule):
    (name, value), = settings.items()
    with pytest.raises(ValueError, match=rule + "[^:]*: .*" + re.escape(f"{name}={value!r}")):
        BatchConfig(**settings)


@pytest.mark.parametrize("field", ["max_texts", "max_chars", "max_beam", "max_len_b"])
def test_request_limits_must_be_whole_numbers_of_at_least_one(field):
    """0 or less would refuse every request with a 413."""
    from aiayn.serve.limits import ServeLimits

    for bad in (0, -5, 2.5):
        with pytest.raises(ValueError, match=f"{field} must be a whole number of at least 1, got {bad!r}"):
            ServeLimits(**{field: bad})


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_a_client_that_disconnects_leaves_the_running_search(model_dir, live_server, worker):
    """In both workers; the thread's search is a coroutine's task, whose cancellation lands later
    than a future's: the answer is still a 499, never a 500 (the response counts say which)."""
    httpx = pytest.importorskip("httpx", reason="the test extra installs httpx")
    import json

    url = live_server(create_app(model_dir, batching=BatchConfig(worker=worker), limits=LIMITS))
    sock = raw_post(url, "/v1/translate", json.dumps(BEAM).encode())
    started = wait_for(url, lambda m: m["texts_in_flight"] == 1 and m["continuous_steps"] > 0, "in the search")
    sock.close()
    fours = started["responses"].get("4xx", 0)
    after = wait_for(url, lambda m: m["cancelled_texts"]["disconnect"] == 1 and m["texts_in_flight"] == 0
                     and m["responses"].get("4xx", 0) > fours, "the text dropped and answered")
    assert after["continuous_steps"] < LONG // 2  # it left long before its end
    time.sleep(0.2)
    assert httpx.get(f"{url}/v1/metrics").json()["continuous_steps"] == after["continuous_steps"]  # no step since
    assert started["cancelled_texts"]["disconnect"] == 0
    assert after["responses"]["4xx"] == fours + 1 and "5xx" not in after["responses"]  # a 499, no 500
    answered = httpx.post(f"{url}/v1/translate", json={"text": ["a b"], "beam_size": 2, "max_len_b": 4}, timeout=30)
    assert answered.status_code == 200  # the search goes on serving


def test_a_timed_out_request_leaves_the_running_search(model_dir):
    TestClient = pytest.importorskip("fastapi.testclient", reason="the serve extra is not installed").TestClient

    app = create_app(model_dir, batching=BatchConfig(timeout_s=0.5, worker="thread"), limits=LIMITS)
    with TestClient(app) as client:
        response = client.post("/v1/translate", json=BEAM)
        assert response.status_code == 504
        deadline = time.monotonic() + 60
        while (m := client.get("/v1/metrics").json())["texts_in_flight"]:
            assert time.monotonic() < deadline, m
            time.sleep(0.05)
        assert m["cancelled_texts"] == {"timeout": 1, "disconnect": 0} and m["timeouts"] == 1
        assert 0 < m["continuous_steps"] < LONG // 2
