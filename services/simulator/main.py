"""Entry point: ``python -m services.simulator`` runs one simulated pod per configured port
in one process until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from services.simulator.server import SimPod, start_pod
from services.simulator.settings import SimulatorSettings
from shared.logs import setup_logging

log = logging.getLogger(__name__)


def _parse_args(argv: list[str] | None) -> dict[str, object]:
    ap = argparse.ArgumentParser(
        prog="headroom simulator", description="Simulated vLLM model-server pods"
    )
    ap.add_argument("--host", help="interface to listen on (HEADROOM_SIM_HOST)")
    ap.add_argument("--ports", help="comma-separated ports, one pod each (HEADROOM_SIM_PORTS)")
    ap.add_argument("--names", help="comma-separated pod names (HEADROOM_SIM_NAMES)")
    ap.add_argument("--profile", help="engine profile (HEADROOM_SIM_PROFILE)")
    ap.add_argument("--model", help="served model name (HEADROOM_SIM_MODEL)")
    ap.add_argument("--seed", type=int, help="base random seed (HEADROOM_SIM_SEED)")
    args = ap.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


async def run(settings: SimulatorSettings, stop: asyncio.Event) -> None:
    pods: list[SimPod] = []
    try:
        for i, (name, port) in enumerate(
            zip(settings.name_list(), settings.port_list(), strict=True)
        ):
            pod = await start_pod(
                name,
                settings.host,
                port,
                profile=settings.profile,
                model=settings.model,
                seed=settings.seed + i,
            )
            pods.append(pod)
            log.info("pod %s serving %s at %s", name, settings.model, pod.url)
        await stop.wait()
    finally:
        for pod in pods:
            await pod.stop()


def main(argv: list[str] | None = None) -> None:
    settings = SimulatorSettings(**_parse_args(argv))
    setup_logging("simulator", settings.log_level)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await run(settings, stop)

    asyncio.run(_main())
