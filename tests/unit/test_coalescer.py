"""Coalescer: immediate dispatch when idle, batching while a batch is in flight, caps,
slicing back per caller, deadlines and failures. A fake transport stands in for NATS.

Timing: windows are long (60 s) where a test must show that nobody waits them out, and the
assertions only bound completion by a few seconds, so a loaded machine cannot flake them."""

from __future__ import annotations

import asyncio

import numpy as np

from services.gateway.coalescer import BatchResult, Coalescer, CoalescerConfig

N = 11
LONG = 60.0


def rows(n: int, tag: float) -> np.ndarray:
    """``n`` rows whose first column identifies the caller (tag) and the row (i)."""
    r = np.zeros((n, N), dtype=np.float32)
    r[:, 0] = tag
    r[:, 1] = np.arange(n)
    return r


class FakeTransport:
    """Records batches; each batch waits for ``release`` (if set) and predicts
    ttft = col0 * 1000 + col1, tpot = -ttft (so a mis-sliced reply is visible)."""

    def __init__(self, *, hold: bool = False, result: BatchResult | None = None) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()
        self.result = result
        self.concurrent = 0
        self.max_concurrent = 0
        self.raise_error = False

    async def send(self, x: np.ndarray, segments: list[int], timeout_s: float) -> BatchResult:
        self.batches.append((len(x), list(segments)))
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await self.release.wait()
        finally:
            self.concurrent -= 1
        if self.raise_error:
            raise RuntimeError("boom")
        if self.result is not None:
            return self.result
        ttft = x[:, 0].astype(np.float64) * 1000 + x[:, 1]
        return BatchResult(ttft, -ttft, "v1", None, "r1")


def expect(result: BatchResult, tag: float, n: int) -> None:
    want = tag * 1000 + np.arange(n)
    assert result.reason is None and result.model_version == "v1"
    assert result.ttft_ms.tolist() == want.tolist()
    assert result.tpot_ms.tolist() == (-want).tolist()


async def test_a_lone_request_does_not_wait_out_the_window():
    t = FakeTransport()
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
    r = await asyncio.wait_for(c.submit(rows(3, 1), 5.0), 5.0)
    expect(r, 1, 3)
    assert t.batches == [(3, [0])]
    # and again: idle again after the first completed
    expect(await asyncio.wait_for(c.submit(rows(2, 2), 5.0), 5.0), 2, 2)


async def test_a_lone_call_is_sent_from_its_callers_task():
    tasks = []

    async def send(x: np.ndarray, segments: list[int], timeout_s: float) -> BatchResult:
        tasks.append(asyncio.current_task())
        return BatchResult(x[:, 0].astype(np.float64), x[:, 0].astype(np.float64), "v1")

    c = Coalescer(send, CoalescerConfig(window_s=LONG))

    async def caller() -> tuple[BatchResult, asyncio.Task | None]:
        return await c.submit(rows(2, 7), 5.0), asyncio.current_task()

    r, task = await asyncio.wait_for(caller(), 5.0)
    assert tasks == [task] and r.ttft_ms.tolist() == [7.0, 7.0]
    assert c.in_flight == 0 and c.stats.batches == 1


async def test_a_transport_that_keeps_its_deadline_answers_the_lone_calls_timeout():
    async def send(x: np.ndarray, segments: list[int], timeout_s: float) -> BatchResult:
        await asyncio.sleep(timeout_s)
        return BatchResult(reason="timeout", replica="own")

    c = Coalescer(send, CoalescerConfig(window_s=LONG), keeps_deadline=True)
    r = await asyncio.wait_for(c.submit(rows(1, 1), 0.05), 5.0)
    assert r.reason == "timeout" and r.replica == "own"  # the transport's, not a guard's
    assert c.stats.timeouts == 1 and c.in_flight == 0


async def test_calls_arriving_during_a_batch_go_out_together_and_are_sliced_back():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
    first = asyncio.create_task(c.submit(rows(2, 1), 10.0))
    await asyncio.sleep(0)
    others = [
        asyncio.create_task(c.submit(rows(n, tag), 10.0)) for tag, n in ((2, 3), (3, 1), (4, 5))
    ]
    await asyncio.sleep(0.01)
    assert t.batches == [(2, [0])] and c.pending == 3  # waiting: a batch is in flight
    t.release.set()  # the completion sends what queued meanwhile, without the window
    results = await asyncio.wait_for(asyncio.gather(first, *others), 5.0)
    assert t.batches == [(2, [0]), (9, [0, 3, 4])]
    for r, (tag, n) in zip(results, ((1, 2), (2, 3), (3, 1), (4, 5)), strict=True):
        expect(r, tag, n)


async def test_the_window_sends_a_second_batch_while_one_is_in_flight():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=0.001, max_in_flight=4))
    first = asyncio.create_task(c.submit(rows(1, 1), 10.0))
    await asyncio.sleep(0)
    second = [asyncio.create_task(c.submit(rows(1, tag), 10.0)) for tag in (2, 3)]
    for _ in range(500):  # the window elapses; bounded wait
        if len(t.batches) == 2:
            break
        await asyncio.sleep(0.01)
    assert t.batches == [(1, [0]), (2, [0, 1])] and c.in_flight == 2
    t.release.set()
    for r, tag in zip(await asyncio.gather(first, *second), (1, 2, 3), strict=True):
        expect(r, tag, 1)


async def test_row_cap_splits_batches_between_callers_and_a_big_caller_goes_alone():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG, max_rows=10, max_in_flight=8))
    first = asyncio.create_task(c.submit(rows(1, 9), 10.0))
    await asyncio.sleep(0)
    sizes = {1: 4, 2: 4, 3: 4, 4: 25, 5: 2}
    tasks = [asyncio.create_task(c.submit(rows(n, tag), 10.0)) for tag, n in sizes.items()]
    await asyncio.sleep(0.01)
    t.release.set()
    results = await asyncio.wait_for(asyncio.gather(first, *tasks), 5.0)
    assert t.batches[0] == (1, [0])
    # 4+4 fit, the third 4 does not; 25 rows go alone; 2 follow
    assert t.batches[1:] == [(8, [0, 4]), (4, [0]), (25, [0]), (2, [0])]
    for r, (tag, n) in zip(results[1:], sizes.items(), strict=True):
        expect(r, tag, n)


async def test_in_flight_cap_is_respected():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=0.0, max_in_flight=2))  # window 0: no coalescing
    tasks = [asyncio.create_task(c.submit(rows(1, i), 10.0)) for i in range(6)]
    await asyncio.sleep(0.01)
    assert len(t.batches) == 2 and c.pending == 4
    t.release.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
    assert t.max_concurrent == 2 and len(t.batches) == 6
    for i, r in enumerate(results):
        expect(r, i, 1)


async def test_deadline_gives_timeout_and_a_queued_expired_call_is_never_sent():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
    slow = asyncio.create_task(c.submit(rows(1, 1), 10.0))
    await asyncio.sleep(0)
    r = await asyncio.wait_for(c.submit(rows(1, 2), 0.05), 5.0)  # queued behind the first
    assert r.reason == "timeout" and r.ttft_ms is None
    assert c.stats.timeouts == 1
    t.release.set()
    expect(await slow, 1, 1)
    assert t.batches == [(1, [0])]  # the expired call was dropped, not sent
    assert c.pending == 0


async def test_a_stuck_batch_times_out_its_callers():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
    r = await asyncio.wait_for(c.submit(rows(2, 1), 0.05), 5.0)
    assert r.reason == "timeout"
    t.release.set()
    await c.close()
    assert c.in_flight == 0


async def test_failures_reach_every_caller_of_the_batch():
    for result, reason in (
        (BatchResult(reason="no_model", replica="r9"), "no_model"),
        (BatchResult(reason="no_responders"), "no_responders"),
        (BatchResult(np.zeros(1), np.zeros(1), "v1"), "error"),  # wrong length
    ):
        t = FakeTransport(hold=True, result=result)
        c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
        tasks = [asyncio.create_task(c.submit(rows(2, i), 5.0)) for i in range(3)]
        await asyncio.sleep(0.01)
        t.release.set()
        out = await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
        assert [r.reason for r in out] == [reason] * 3
        assert all(r.ttft_ms is None for r in out)


async def test_a_raising_transport_is_an_error_not_an_exception():
    t = FakeTransport()
    t.raise_error = True
    c = Coalescer(t.send)
    r = await asyncio.wait_for(c.submit(rows(1, 1), 5.0), 5.0)
    assert r.reason == "error" and c.in_flight == 0


async def test_a_cancelled_caller_is_not_sent_and_others_are_unaffected():
    t = FakeTransport(hold=True)
    c = Coalescer(t.send, CoalescerConfig(window_s=LONG))
    first = asyncio.create_task(c.submit(rows(1, 1), 10.0))
    await asyncio.sleep(0)
    gone = asyncio.create_task(c.submit(rows(1, 2), 10.0))
    kept = asyncio.create_task(c.submit(rows(1, 3), 10.0))
    await asyncio.sleep(0.01)
    gone.cancel()  # e.g. the HTTP client went away
    await asyncio.gather(gone, return_exceptions=True)
    t.release.set()
    expect(await asyncio.wait_for(first, 5.0), 1, 1)
    expect(await asyncio.wait_for(kept, 5.0), 3, 1)
    assert t.batches == [(1, [0]), (1, [0])] and c.stats.timeouts == 0
