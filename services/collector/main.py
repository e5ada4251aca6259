"""Entry point: ``python -m services.collector`` (or ``headroom collector``)."""

from __future__ import annotations

import argparse
import logging

from services.collector.service import CollectorService
from services.collector.settings import CollectorSettings
from shared.pod_credentials import PodCredentialError
from shared.runner import run_service
from shared.telemetry import setup_telemetry

log = logging.getLogger("headroom.collector")


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


def main(argv: list[str] | None = None) -> None:
    overrides = _parse_args(argv)
    settings = CollectorSettings(**overrides)
    try:
        run_service(
            "collector",
            settings.log_level,
            lambda tel: CollectorService(settings, telemetry=tel),
            telemetry=lambda: setup_telemetry(
                "collector", pool=settings.pool, namespace=settings.namespace
            ),
        )
    except PodCredentialError as e:  # the message names the file, never the key
        log.error("invalid pod credentials: %s", e)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
