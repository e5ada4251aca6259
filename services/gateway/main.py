"""Entry point: ``python -m services.gateway`` (the ``headroom gateway`` command)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from services.gateway.scheduling.params import ConfigError
from services.gateway.server import GatewayStartupInterrupted, start_gateway
from services.gateway.settings import GatewaySettings
from shared.logs import setup_logging
from shared.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)


async def run(
    settings: GatewaySettings,
    stop: asyncio.Event | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    """Serve until ``stop`` is set or SIGTERM/SIGINT arrives."""
    stop = stop or asyncio.Event()
    # waits for NATS as long as it takes; SIGTERM/SIGINT during startup aborts it
    try:
        running = await start_gateway(settings, startup_timeout_s=None, telemetry=telemetry)
    except GatewayStartupInterrupted:
        log.info("gateway stopped before it finished starting")
        return
    except ConfigError as e:
        log.error("invalid scheduling config: %s", e)
        raise SystemExit(2) from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    log.info("gateway listening on %s", running.url)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({stopper, running.task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        log.info("gateway stopping")
        await running.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="headroom gateway", description=__doc__)
    parser.add_argument("--host", help="bind address (HEADROOM_GATEWAY_HOST)")
    parser.add_argument("--port", type=int, help="port (HEADROOM_GATEWAY_PORT)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    settings = GatewaySettings(**overrides)
    setup_logging("gateway", settings.log_level)
    tel = setup_telemetry("gateway", pool=settings.pool, namespace=settings.namespace)
    try:
        asyncio.run(run(settings, telemetry=tel))
    finally:
        tel.shutdown()


if __name__ == "__main__":
    main()
