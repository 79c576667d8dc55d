"""The dynamic batcher: batching, isolation of a failing request, the queue bound, timeouts."""

import asyncio
import threading
import time

import pytest

from aiayn.serve.batcher import BatchConfig, DynamicBatcher, QueueFull


def upper(texts, options):
    if any(t == "boom" for t in texts):
        raise ValueError("bad text")
    return [t.upper() + (options or "") for t in texts]


def run(coroutine):
    return asyncio.run(coroutine)


def test_concurrent_requests_are_batched_and_answered_in_order():
    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, max_wait_ms=50))

    async def main():
        return await asyncio.gather(*(batcher.submit([f"t{i}", f"u{i}"]) for i in range(4)))

    assert run(main()) == [[f"T{i}", f"U{i}"] for i in range(4)]
    stats = batcher.stats.snapshot(0)
    assert stats["batches"] < 4 and max(stats["batch_sizes"]) > 2  # requests shared a decode call
    assert stats["requests"] == 4 and stats["texts"] == 8
    batcher.close()


def test_requests_with_other_options_are_not_mixed():
    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, max_wait_ms=50))

    async def main():
        return await asyncio.gather(batcher.submit(["a"], "!"), batcher.submit(["b"], "?"), batcher.submit(["c"], "!"))

    assert run(main()) == [["A!"], ["B?"], ["C!"]]
    batcher.close()


def test_a_failing_request_fails_alone():
    batcher = DynamicBatcher(upper, BatchConfig(max_batch=8, max_wait_ms=50))

    async def main():
        return await asyncio.gather(batcher.submit(["ok"]), batcher.submit(["boom"]), batcher.submit(["fine"]),
                                    return_exceptions=True)

    good, bad, fine = run(main())
    assert good == ["OK"] and fine == ["FINE"] and isinstance(bad, RuntimeError)
    assert batcher.stats.snapshot(0)["errors"] == 1
    batcher.close()


def test_a_full_queue_refuses_at_once_and_a_slow_request_times_out():
    release = threading.Event()

    def slow(texts, options):
        release.wait(5)
        return texts

    batcher = DynamicBatcher(slow, BatchConfig(max_batch=1, max_wait_ms=0, max_queue=2, timeout_s=0.3))

    async def main():
        first = asyncio.ensure_future(batcher.submit(["busy"]))  # taken by the worker, blocks it
        await asyncio.sleep(0.05)
        waiting = [asyncio.ensure_future(batcher.submit([f"w{i}"])) for i in range(2)]
        await asyncio.sleep(0.05)
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
    """A fake continuous session: text t ends after len(t) steps of 2 ms, as t.upper() + options.
    It records, per step, the first text of each request in flight."""

    def __init__(self, options, log, fail_on=None):
        self.options, self.log, self.fail_on = options or "", log, fail_on
        self.left: dict = {}

    def __len__(self):
        return len(self.left)

    def add(self, request, texts):
        if self.fail_on in texts:
            raise ValueError("bad text")
        self.left[request] = (texts, max(len(t) for t in texts))

    def step(self):
        time.sleep(0.002)
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


def continuous(log, fail_on=None, **config):
    return DynamicBatcher(upper, BatchConfig(**config), session=lambda options: CountdownSession(options, log, fail_on))


def test_continuous_requests_join_a_running_session_and_leave_when_done():
    log: list = []
    batcher = continuous(log, max_batch=8)

    async def main():
        long = asyncio.ensure_future(batcher.submit(["x" * 30]))
        await asyncio.sleep(0.05)  # the long one is running when the short ones come
        short = await asyncio.gather(*(batcher.submit([f"s{i}"]) for i in range(3)))
        return short, await long

    short, long = run(main())
    assert short == [["S0"], ["S1"], ["S2"]] and long == ["X" * 30]
    assert any("x" * 30 in s and len(s) > 1 for s in log)  # the short ones joined while the long one ran
    assert log[-1] == {"x" * 30} and len(log) == 30  # ... and left before it: no step was added for them
    assert batcher.stats.snapshot(0)["continuous_steps"] == len(log)
    batcher.close()


def test_continuous_keeps_options_apart_and_the_texts_in_flight_bounded():
    log: list = []
    batcher = continuous(log, max_batch=2)

    async def main():
        return await asyncio.gather(*(batcher.submit([f"t{i}"], "!" if i % 2 else "?") for i in range(6)))

    assert run(main()) == [[f"T{i}" + ("!" if i % 2 else "?")] for i in range(6)]
    assert all(len({int(t[1:]) % 2 for t in s}) == 1 for s in log)  # a step holds one kind of options
    batcher.close()

    log.clear()  # requests with the same options: they join each other, but never more than max_batch texts
    batcher = continuous(log, max_batch=2)

    async def same():
        return await asyncio.gather(*(batcher.submit([f"t{i}"]) for i in range(6)))

    assert run(same()) == [[f"T{i}"] for i in range(6)]
    assert max(len(s) for s in log) == 2
    batcher.close()


def test_continuous_failures_hit_only_the_bad_request():
    for fail_on in ("boom", "step"):  # a request that cannot join; a step that raises (retried one by one)
        log: list = []
        batcher = continuous(log, fail_on=fail_on, max_batch=8)

        async def main():
            return await asyncio.gather(batcher.submit(["ok"]), batcher.submit(["boom"]), batcher.submit(["fine"]),
                                        return_exceptions=True)

        good, bad, fine = run(main())
        assert good == ["OK"] and fine == ["FINE"] and isinstance(bad, RuntimeError), fail_on
        batcher.close()
