"""bench/bench_disconnect_watch.py runs (a tiny run; no timing asserted) and its hook path
really watches: a disconnect on the cycle reaches the request's RequestLife."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry, Counter

from bench.bench_disconnect_watch import _cycle, measure
from services.gateway.lifecycle import RequestLife


async def test_the_benchmark_runs():
    out = await measure(50, 1)
    assert set(out) == {"n", "repeat", "empty_loop_us", "task", "hook"}
    assert len(out["task"]["runs_us"]) == len(out["hook"]["runs_us"]) == 1


async def test_the_hook_it_measures_sees_a_disconnect():
    counter = Counter("d", "x", ["stage"], registry=CollectorRegistry())
    c = _cycle()
    life = RequestLife(counter, "id", "/v1/completions")

    async def handler() -> None:  # the request's task, waiting somewhere
        life.watch(c.send, c.receive)
        await asyncio.sleep(30)

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)
    c.disconnected = True  # what uvicorn's connection_lost does
    c.message_event.set()
    assert life.gone and counter.labels("body")._value.get() == 1
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()  # the handler's task is cancelled where it waits
