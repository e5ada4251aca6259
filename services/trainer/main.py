"""Entry point: ``python -m services.trainer`` (the ``headroom trainer`` command)."""

from __future__ import annotations

from services.trainer.service import TrainerService
from services.trainer.settings import TrainerSettings
from shared.runner import run_service
from shared.telemetry import setup_telemetry


def main(argv: list[str] | None = None) -> None:
    settings = TrainerSettings()
    run_service(
        "trainer",
        settings.log_level,
        lambda tel: TrainerService(settings, telemetry=tel),
        telemetry=lambda: setup_telemetry(
            "trainer", pool=settings.pool, namespace=settings.namespace
        ),
    )


if __name__ == "__main__":
    main()
