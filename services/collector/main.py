"""Entry point: ``python -m services.collector`` (or ``headroom collector``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from services.collector.service import CollectorService
from services.collector.settings import CollectorSettings
from shared.logs import setup_logging

log = logging.getLogger(__name__)


def _parse_args(argv: list[str] | None) -> dict:
    p = argparse.ArgumentParser(
        prog="headroom collector",
        description="Scrape model-server pods' /metrics and publish pod snapshots on NATS. "
        "Configured by HEADROOM_COLLECTOR_* (and HEADROOM_NATS_URL, HEADROOM_POOL, "
        "HEADROOM_NAMESPACE); flags override the environment.",
    )
    p.add_argument("--pods", help='static pod list "name=url,name=url"')
    p.add_argument("--engine", help="model-server engine: vllm, jetstream, sglang, tgi")
    p.add_argument("--discovery", choices=["static", "kubernetes"])
    p.add_argument("--k8s-label-selector", help="label selector of the pool (kubernetes)")
    p.add_argument("--k8s-namespace", help="namespace of the pool (kubernetes)")
    p.add_argument("--scrape-interval-ms", type=int)
    p.add_argument("--admin-port", type=int)
    args = p.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


async def run(settings: CollectorSettings) -> None:
    """Run until SIGTERM/SIGINT; a signal during start-up (e.g. while NATS is still
    unreachable) stops it too."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    service = CollectorService(settings)
    starting = asyncio.create_task(service.start(), name="collector-start")
    stopping = asyncio.create_task(stop.wait(), name="collector-stop-signal")
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # raise a start-up error
            await stopping
        log.info("collector stopping")
    finally:
        stopping.cancel()
        await _cancel_until_done(starting)
        await service.stop()


async def _cancel_until_done(task: asyncio.Task, attempts: int = 40, wait_s: float = 0.25) -> None:
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


def main(argv: list[str] | None = None) -> None:
    overrides = _parse_args(argv)
    settings = CollectorSettings(**overrides)
    setup_logging("collector", settings.log_level)
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
