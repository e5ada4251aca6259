"""The one way every service process runs: start, serve until SIGTERM/SIGINT, stop cleanly.

A signal that arrives during start-up (for example while NATS is still unreachable) aborts
the start instead of being lost; the service's ``stop()`` is always called and must cope
with a partial start.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable
from typing import Protocol

from shared.logs import setup_logging
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def cancel_until_done(task: asyncio.Task, attempts: int = 40, wait_s: float = 0.25) -> None:
    """Cancel ``task`` and wait for it, re-cancelling if the cancellation was swallowed.

    On Python 3.11 ``asyncio.wait_for`` drops a cancellation that arrives as its inner
    awaitable completes; nats-py's initial connect (a refused TCP connect inside wait_for,
    then a retry loop) hits this, so one cancel() may not stop a connect in progress.
    """
    for _ in range(attempts):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=wait_s)
    if not task.done():
        log.error("start-up task did not stop after %d cancellations", attempts)
        return
    if not task.cancelled() and task.exception() is not None:
        log.debug("start-up ended with %r", task.exception())


async def serve(name: str, service: Service, stop: asyncio.Event | None = None) -> None:
    """Start ``service`` and run until ``stop`` is set or SIGTERM/SIGINT arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    starting = asyncio.create_task(service.start(), name=f"{name}-start")
    stopping = asyncio.create_task(stop.wait(), name=f"{name}-stop-signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # raise a start-up error
            # What start-up allocated (modules, models, connections) lives for the whole run:
            # keep it out of the collector's reach so full collections stay short under load.
            gc.collect()
            gc.freeze()
            log.info("%s started", name)
            await stopping
        log.info("%s stopping", name)
    finally:
        stopping.cancel()
        await cancel_until_done(starting)
        await service.stop()


def run_service(
    name: str,
    log_level: str,
    factory: Callable[..., Service],
    *,
    telemetry: Callable[[], Telemetry] | None = None,
) -> None:
    """Process entry point: JSON logging, then :func:`serve` in a fresh event loop.

    Without ``telemetry`` the service is ``factory()``. With it, ``telemetry()`` (called
    after logging is set up) builds the process's :class:`~shared.telemetry.Telemetry`, the
    service is ``factory(telemetry)``, and the telemetry is flushed and shut down at exit.
    """
    setup_logging(name, log_level)
    tel = telemetry() if telemetry is not None else None
    try:
        asyncio.run(serve(name, factory() if tel is None else factory(tel)))
    finally:
        if tel is not None:
            tel.shutdown()
