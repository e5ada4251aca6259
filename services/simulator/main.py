"""Entry point: ``python -m services.simulator`` runs one simulated pod per configured port
in one process until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging

from services.simulator.server import SimPod, start_pod
from services.simulator.settings import SimulatorSettings
from shared.runner import run_service
from shared.telemetry import Telemetry, setup_telemetry

log = logging.getLogger(__name__)


def _parse_args(argv: list[str] | None) -> dict[str, object]:
    ap = argparse.ArgumentParser(
        prog="headroom simulator", description="Simulated vLLM model-server pods"
    )
    ap.add_argument("--host", help="interface to listen on (HEADROOM_SIM_HOST)")
    ap.add_argument("--ports", help="comma-separated ports, one pod each (HEADROOM_SIM_PORTS)")
    ap.add_argument("--names", help="comma-separated pod names (HEADROOM_SIM_NAMES)")
    ap.add_argument("--profile", help="engine profile (HEADROOM_SIM_PROFILE)")
    ap.add_argument("--vllm-args", help="`vllm serve` engine flags (HEADROOM_SIM_VLLM_ARGS)")
    ap.add_argument("--vllm-version", help="vLLM version (HEADROOM_SIM_VLLM_VERSION)")
    ap.add_argument("--model", help="served model name (HEADROOM_SIM_MODEL)")
    ap.add_argument("--seed", type=int, help="base random seed (HEADROOM_SIM_SEED)")
    ap.add_argument("--backlog", type=int, help="listen backlog per pod (HEADROOM_SIM_BACKLOG)")
    ap.add_argument("--api-key", help="require this bearer key on /v1/* (like vLLM; "
                    "comma-separated for several; HEADROOM_SIM_API_KEY or VLLM_API_KEY)")  # fmt: skip
    args = ap.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


class SimulatorProcess:
    """One simulated pod per configured port, in this process."""

    def __init__(self, settings: SimulatorSettings, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.tel = telemetry
        self.pods: list[SimPod] = []

    async def start(self) -> None:
        s = self.settings
        pool = s.resolved_pool()
        for resolved in {r.describe(): r for r in pool}.values():
            for note in resolved.notes:
                log.warning("vLLM args: %s", note)
            if s.vllm_args:
                log.info("engine: %s", resolved.describe())
        pods = zip(s.name_list(), s.port_list(), pool, strict=True)
        for i, (name, port, resolved) in enumerate(pods):
            pod = await start_pod(
                name,
                s.host,
                port,
                profile=resolved.profile,
                model=s.model,
                seed=s.seed + i,
                telemetry=self.tel,
                api_keys=s.api_keys(),
                backlog=s.backlog,
            )
            self.pods.append(pod)
            log.info("pod %s (%s) serving %s at %s", name, resolved.profile.name, s.model, pod.url)

    async def stop(self) -> None:
        for pod in self.pods:
            await pod.stop()
        self.pods.clear()


def main(argv: list[str] | None = None) -> None:
    settings = SimulatorSettings(**_parse_args(argv))
    run_service(
        "simulator",
        settings.log_level,
        lambda tel: SimulatorProcess(settings, tel),
        telemetry=lambda: setup_telemetry(
            "simulator", pool=settings.pool, namespace=settings.namespace
        ),
    )


if __name__ == "__main__":
    main()
