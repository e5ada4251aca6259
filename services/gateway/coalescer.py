"""Coalesce concurrent prediction calls into few predictor requests, with per-call deadlines.

A call (one routing decision: its candidate rows and a deadline) that finds no batch in flight
and nothing queued is sent at once from the caller's own task (no task or future in between,
so a lone request neither waits out the window nor pays extra event-loop hops); while a
batch is in flight, arriving calls wait at most ``window_s`` and then go out together as one
batch (at most ``max_rows`` rows; a call is never split, a larger call goes alone), with at
most ``max_in_flight`` batches outstanding; when a batch completes, whatever queued meanwhile
goes out immediately. Each call's reply is its slice of the batch reply. A call whose
deadline passes gets a ``timeout`` result at once (it is dropped from the queue if not yet
sent); a failed batch gives every call in it the batch's reason.

The transport is a ``send(rows, segments, timeout_s) -> BatchResult`` coroutine function
(the predictor client's NATS request), so the unit tests drive the coalescer without NATS.
A call may carry an opaque ``trace`` (the caller's span context, when tracing is on); a
batch whose calls carry any is sent as ``send(rows, segments, timeout_s, traces)``, so the
request can name every caller it serves.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

REASON_TIMEOUT = "timeout"
REASON_ERROR = "error"


@dataclass(frozen=True, slots=True)
class CoalescerConfig:
    window_s: float = 0.001  # longest wait of a call while a batch is in flight (0: no coalescing)
    max_rows: int = 2048  # rows per batch (a single larger call goes alone)
    max_in_flight: int = 8  # concurrent batches


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Predictions for a batch's rows (or one call's slice), or why there are none."""

    ttft_ms: np.ndarray | None = None
    tpot_ms: np.ndarray | None = None
    model_version: str | None = None
    reason: str | None = None  # set when ttft_ms is None
    replica: str | None = None

    def slice(self, start: int, stop: int) -> BatchResult:
        if self.ttft_ms is None or self.tpot_ms is None:
            return self
        return BatchResult(
            self.ttft_ms[start:stop],
            self.tpot_ms[start:stop],
            self.model_version,
            None,
            self.replica,
        )


Send = Callable[[np.ndarray, list[int], float], Awaitable[BatchResult]]


@dataclass(slots=True)
class _Call:
    rows: np.ndarray
    deadline: float
    future: asyncio.Future
    trace: object = None


@dataclass(slots=True)
class CoalescerStats:
    calls: int = 0
    batches: int = 0
    batch_rows: int = 0
    timeouts: int = 0  # calls whose deadline passed


class Coalescer:
    def __init__(
        self, send: Send, config: CoalescerConfig | None = None, *, keeps_deadline: bool = False
    ) -> None:
        """``keeps_deadline``: ``send`` returns (a timeout result) by the ``timeout_s`` it is
        given, so a lone call needs no guard of its own."""
        self.send = send
        self.keeps_deadline = keeps_deadline
        self.config = config or CoalescerConfig()
        self.stats = CoalescerStats()
        self._pending: deque[_Call] = deque()
        self._pending_rows = 0
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def submit(self, rows: np.ndarray, timeout_s: float, trace: object = None) -> BatchResult:
        """Predictions for ``rows`` (n x features) within ``timeout_s``; never raises."""
        self.stats.calls += 1
        if self._in_flight == 0 and not self._pending:
            return await self._direct(rows, timeout_s, trace)
        loop = asyncio.get_running_loop()
        call = _Call(rows, loop.time() + timeout_s, loop.create_future(), trace)
        self._pending.append(call)
        self._pending_rows += len(rows)
        self._kick()
        # a timer rather than asyncio.wait_for: no wrapper future, one loop hop less per call
        timer = loop.call_later(timeout_s, self._expire, call.future)
        try:
            return await call.future
        finally:
            timer.cancel()

    async def _direct(self, rows: np.ndarray, timeout_s: float, trace: object) -> BatchResult:
        """The lone call: sent by its caller, within its deadline (enforced here unless the
        transport keeps it itself, then its own timeout answers and counts it)."""
        self._in_flight += 1
        self.stats.batches += 1
        self.stats.batch_rows += len(rows)
        args = (rows, [0], timeout_s, [trace]) if trace is not None else (rows, [0], timeout_s)
        try:
            if self.keeps_deadline:
                result = await self.send(*args)  # type: ignore[arg-type]
            else:
                async with asyncio.timeout(timeout_s):
                    result = await self.send(*args)  # type: ignore[arg-type]
        except TimeoutError:
            result = BatchResult(reason=REASON_TIMEOUT)
        except Exception as e:  # the transport should not raise
            log.warning("prediction request failed: %s", e)
            result = BatchResult(reason=REASON_ERROR)
        finally:
            self._in_flight -= 1
            if self._pending:
                self._flush()  # what queued while this call was in flight goes now
        if result.reason == REASON_TIMEOUT:
            self.stats.timeouts += 1
        return _checked(result, len(rows))

    def _expire(self, future: asyncio.Future) -> None:
        if not future.done():  # still queued or in flight: the caller falls back now
            self.stats.timeouts += 1
            future.set_result(BatchResult(reason=REASON_TIMEOUT))

    # --- dispatch -----------------------------------------------------------------------
    def _kick(self) -> None:
        c = self.config
        if self._in_flight == 0 or c.window_s <= 0 or self._pending_rows >= c.max_rows:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(c.window_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._flush()

    def _take(self) -> list[_Call]:
        batch: list[_Call] = []
        rows = 0
        while self._pending:
            call = self._pending[0]
            if call.future.done():  # expired (or its caller was cancelled) while queued
                self._pending.popleft()
                self._pending_rows -= len(call.rows)
                continue
            if batch and rows + len(call.rows) > self.config.max_rows:
                break
            self._pending.popleft()
            self._pending_rows -= len(call.rows)
            batch.append(call)
            rows += len(call.rows)
            if self.config.window_s <= 0:
                break  # no coalescing: one call per request
        return batch

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = asyncio.get_running_loop()
        while self._pending and self._in_flight < self.config.max_in_flight:
            batch = self._take()
            if not batch:
                break
            self._in_flight += 1
            task = loop.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # at the cap: the next completion flushes what is left

    async def _run(self, batch: list[_Call]) -> None:
        loop = asyncio.get_running_loop()
        sizes = [len(c.rows) for c in batch]
        segments = np.cumsum([0, *sizes[:-1]]).tolist()
        rows = batch[0].rows if len(batch) == 1 else np.concatenate([c.rows for c in batch])
        timeout = max(c.deadline for c in batch) - loop.time()
        self.stats.batches += 1
        self.stats.batch_rows += len(rows)
        try:
            traces = [c.trace for c in batch if c.trace is not None]
            if timeout <= 0:
                result = BatchResult(reason=REASON_TIMEOUT)
            elif traces:
                result = await self.send(rows, segments, timeout, traces)  # type: ignore[call-arg]
            else:
                result = await self.send(rows, segments, timeout)
        except Exception as e:  # the transport should not raise; never lose the callers
            log.warning("prediction batch failed: %s", e)
            result = BatchResult(reason=REASON_ERROR)
        finally:
            self._in_flight -= 1
        result = _checked(result, len(rows))
        for call, start, n in zip(batch, segments, sizes, strict=True):
            if not call.future.done():
                call.future.set_result(result.slice(start, start + n))
        if self._pending:
            self._flush()  # what queued while this batch was in flight goes now

    async def close(self) -> None:
        """Wait for the batches in flight (their callers get their results)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _checked(result: BatchResult, n_rows: int) -> BatchResult:
    """``result``, or an error if it does not hold one prediction per row."""
    if result.ttft_ms is not None and (
        len(result.ttft_ms) != n_rows or len(result.tpot_ms) != n_rows  # type: ignore[arg-type]
    ):
        return BatchResult(reason=REASON_ERROR, replica=result.replica)
    return result
