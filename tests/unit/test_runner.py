"""shared/runner.py: start-up aborted by a stop, a service that stops serving on its own,
the GC tuning after start-up, the uvloop loop factory."""

from __future__ import annotations

import asyncio
import gc

import pytest

from shared import runner


class _Service:
    def __init__(self, start_error: Exception | None = None) -> None:
        self.start_error = start_error
        self.stopped = False
        self.finished: asyncio.Future | None = None
        self.started = asyncio.Event()

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error
        self.finished = asyncio.get_running_loop().create_future()
        self.started.set()

    async def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def restore_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def test_start_aborted_stops_cleanly(restore_gc):
    svc = _Service(runner.StartAborted("signal during start-up"))
    await asyncio.wait_for(runner.serve("t", svc, asyncio.Event()), 5)
    assert svc.stopped


async def test_a_start_up_error_is_raised_after_stop(restore_gc):
    svc = _Service(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        await asyncio.wait_for(runner.serve("t", svc, asyncio.Event()), 5)
    assert svc.stopped


async def test_a_service_that_finishes_on_its_own_stops_the_process(restore_gc):
    svc = _Service()
    task = asyncio.create_task(runner.serve("t", svc, asyncio.Event()))
    await asyncio.wait_for(svc.started.wait(), 5)
    await asyncio.sleep(0.01)
    assert not task.done()
    svc.finished.set_result(None)
    await asyncio.wait_for(task, 5)
    assert svc.stopped


async def test_start_up_allocations_are_frozen_and_thresholds_raised(restore_gc):
    stop = asyncio.Event()
    svc = _Service()
    task = asyncio.create_task(runner.serve("t", svc, stop))
    await asyncio.wait_for(svc.started.wait(), 5)
    await asyncio.sleep(0.01)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == runner.GC_THRESHOLDS
    stop.set()
    await asyncio.wait_for(task, 5)


def test_fast_loop_is_uvloop():
    import uvloop

    assert runner.loop_factory(False) is None
    assert runner.loop_factory(True) is uvloop.new_event_loop
