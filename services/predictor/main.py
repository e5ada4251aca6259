"""Entry point: ``python -m services.predictor`` (the ``headroom predictor`` command)."""

from __future__ import annotations

import asyncio
import logging
import signal

from services.predictor.service import PredictorService
from services.predictor.settings import PredictorSettings
from shared.logs import setup_logging

log = logging.getLogger(__name__)


async def run(settings: PredictorSettings, stop: asyncio.Event) -> None:
    """Run the service until ``stop`` is set."""
    service = PredictorService(settings)
    await service.start()
    try:
        await stop.wait()
    finally:
        log.info("predictor stopping")
        await service.stop()


async def _run_until_signal(settings: PredictorSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run(settings, stop)


def main(argv: list[str] | None = None) -> None:
    settings = PredictorSettings()
    setup_logging("predictor", settings.log_level)
    asyncio.run(_run_until_signal(settings))


if __name__ == "__main__":
    main()
