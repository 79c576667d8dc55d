"""The dynamic batcher: batching, isolation of a failing request, the queue bound, timeouts."""

import asyncio
import threading

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
