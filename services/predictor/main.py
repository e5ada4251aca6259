"""Entry point: ``python -m services.predictor`` (the ``headroom predictor`` command)."""

from __future__ import annotations

from services.predictor.service import PredictorService
from services.predictor.settings import PredictorSettings
from shared.runner import run_service
from shared.telemetry import setup_telemetry


def main(argv: list[str] | None = None) -> None:
    settings = PredictorSettings()
    run_service(
        "predictor",
        settings.log_level,
        lambda tel: PredictorService(settings, telemetry=tel),
        telemetry=lambda: setup_telemetry(
            "predictor", pool=settings.pool, namespace=settings.namespace
        ),
        fast_loop=True,
    )


if __name__ == "__main__":
    main()
