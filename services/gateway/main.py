"""Entry point: ``python -m services.gateway`` (the ``headroom gateway`` command)."""

from __future__ import annotations

import argparse
import asyncio
import logging

from pydantic import ValidationError

from services.gateway.api_keys import KeyFileError
from services.gateway.scheduling.params import ConfigError
from services.gateway.server import RunningGateway, start_gateway
from services.gateway.settings import GatewaySettings
from shared.bus import verify_nats
from shared.pod_credentials import PodCredentialError
from shared.runner import run_service
from shared.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)


def settings_errors(e: ValidationError) -> str:
    """The errors without the input values (pydantic's own message repeats every setting it
    was given, the pod API key included)."""
    return "; ".join(
        f"{'.'.join(map(str, err['loc'])) or 'settings'}: {err['msg']}"
        for err in e.errors(include_input=False, include_url=False)
    )


class GatewayProcess:
    """The gateway as a :mod:`shared.runner` service: uvicorn serving the app in this loop."""

    def __init__(self, settings: GatewaySettings, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.running: RunningGateway | None = None
        self.finished: asyncio.Task | None = (
            None  # uvicorn's serve task (ends on its own only on failure)
        )

    async def start(self) -> None:
        # waits for NATS as long as it takes; SIGTERM/SIGINT during start-up aborts it
        # (GatewayStartupInterrupted is a shared.runner.StartAborted). Credentials are
        # checked first, so a refusal ends the process with one clear line (shared/runner)
        await verify_nats(self.settings, f"gateway-{self.settings.pool}")
        self.running = await start_gateway(
            self.settings, startup_timeout_s=None, telemetry=self.telemetry
        )
        self.finished = self.running.task
        log.info("gateway listening on %s", self.running.url)

    async def stop(self) -> None:
        if self.running is not None:
            await self.running.drain()  # SIGTERM/SIGINT: services/gateway/server.py


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="headroom gateway", description=__doc__)
    parser.add_argument("--host", help="bind address (HEADROOM_GATEWAY_HOST)")
    parser.add_argument("--port", type=int, help="port (HEADROOM_GATEWAY_PORT)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    try:
        settings = GatewaySettings(**overrides)
    except ValidationError as e:
        raise SystemExit(f"invalid gateway settings: {settings_errors(e)}") from None
    try:
        run_service(
            "gateway",
            settings.log_level,
            lambda tel: GatewayProcess(settings, tel),
            telemetry=lambda: setup_telemetry(
                "gateway", pool=settings.pool, namespace=settings.namespace
            ),
            fast_loop=True,
        )
    except ConfigError as e:
        log.error("invalid scheduling config: %s", e)
        raise SystemExit(2) from None
    except (KeyFileError, PodCredentialError) as e:  # messages name files, never a key
        log.error("invalid credentials config: %s", e)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
