"""The one way every service process runs: start, serve until SIGTERM/SIGINT, stop cleanly.

A signal that arrives during start-up (for example while NATS is still unreachable) aborts
the start instead of being lost; the service's ``stop()`` is always called and must cope
with a partial start. After start-up the process's allocations are frozen out of the garbage
collector and the collection thresholds raised (:func:`tune_gc`), so collections stay short
under load. Latency-critical services run on uvloop (``fast_loop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Histogram

from shared.logs import setup_logging
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)


class Service(Protocol):
    """``start()`` and ``stop()``; a service may also expose ``finished``, an awaitable that
    completes when it stops serving on its own (the process then stops as on a signal)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class StartAborted(Exception):
    """Raised by a service's ``start()`` when a stop was requested before it finished
    starting: the process stops cleanly instead of failing."""


# Generation-0 threshold after start-up. The default (700 net allocations) makes a busy
# service run a young collection every millisecond or two; each one also ages survivors
# into the older generations, whose collections are the long pauses. 20,000 keeps young
# collections well under a millisecond while cutting their number ~30x.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc(thresholds: tuple[int, int, int] = GC_THRESHOLDS) -> None:
    """Collect once, freeze what start-up allocated (modules, models, connections: it lives
    for the whole run) out of the collector's reach, and raise the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)


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
            try:
                starting.result()  # raise a start-up error
            except StartAborted as e:
                log.info("%s stopped before it finished starting: %s", name, e)
                return
            tune_gc()
            log.info("%s started", name)
            finished = getattr(service, "finished", None)
            waits = {stopping} if finished is None else {stopping, asyncio.ensure_future(finished)}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        log.info("%s stopping", name)
    finally:
        stopping.cancel()
        await cancel_until_done(starting)
        await service.stop()


class GcPauses:
    """``{prefix}_gc_pause_seconds{generation}``: how long each garbage collection stopped
    the process (a ``gc.callbacks`` hook; :meth:`install` at start, :meth:`remove` at stop)."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        hist = Histogram(
            f"{prefix}_gc_pause_seconds",
            "Garbage-collection pauses of the process, by generation",
            ["generation"],
            buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25),
            registry=registry,
        )
        self._by_gen = [hist.labels(str(g)) for g in range(3)]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._by_gen[info["generation"]].observe(time.perf_counter() - self._started)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


def loop_factory(fast: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when ``fast`` and uvloop is installed (the gateway and predictor extras
    pin it), else None (asyncio's default loop)."""
    if not fast:
        return None
    try:
        import uvloop
    except ImportError:  # e.g. a platform without uvloop wheels: same behaviour, slower
        log.info("uvloop is not installed; using asyncio's event loop")
        return None
    return uvloop.new_event_loop


def run_service(
    name: str,
    log_level: str,
    factory: Callable[..., Service],
    *,
    telemetry: Callable[[], Telemetry] | None = None,
    fast_loop: bool = False,
) -> None:
    """Process entry point: JSON logging, then :func:`serve` in a fresh event loop (uvloop's
    with ``fast_loop``, see :func:`loop_factory`).

    Without ``telemetry`` the service is ``factory()``. With it, ``telemetry()`` (called
    after logging is set up) builds the process's :class:`~shared.telemetry.Telemetry`, the
    service is ``factory(telemetry)``, and the telemetry is flushed and shut down at exit.
    """
    from shared.bus import BusAuthError

    setup_logging(name, log_level)
    tel = telemetry() if telemetry is not None else None
    try:
        with asyncio.Runner(loop_factory=loop_factory(fast_loop)) as runner:
            runner.run(serve(name, factory() if tel is None else factory(tel)))
    except BusAuthError as e:  # refused credentials or TLS: one clear line, no traceback
        log.error("%s cannot start: %s", name, e)
        raise SystemExit(1) from None
    finally:
        if tel is not None:
            tel.shutdown()
