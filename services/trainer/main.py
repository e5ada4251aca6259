"""Entry point: ``python -m services.trainer`` (the ``headroom trainer`` command)."""

from __future__ import annotations

import asyncio
import logging
import signal

from services.trainer.service import TrainerService
from services.trainer.settings import TrainerSettings
from shared.logs import setup_logging

log = logging.getLogger(__name__)


async def run(settings: TrainerSettings, stop: asyncio.Event) -> None:
    """Run the service until ``stop`` is set."""
    service = TrainerService(settings)
    await service.start()
    try:
        await stop.wait()
    finally:
        log.info("trainer stopping")
        await service.stop()


async def _run_until_signal(settings: TrainerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run(settings, stop)


def main(argv: list[str] | None = None) -> None:
    settings = TrainerSettings()
    setup_logging("trainer", settings.log_level)
    asyncio.run(_run_until_signal(settings))


if __name__ == "__main__":
    main()
