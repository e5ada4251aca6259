"""Entry point: ``python -m services.predictor`` (the ``headroom predictor`` command)."""

from __future__ import annotations

from services.predictor.service import PredictorService
from services.predictor.settings import PredictorSettings
from shared.runner import run_service


def main(argv: list[str] | None = None) -> None:
    settings = PredictorSettings()
    run_service("predictor", settings.log_level, lambda: PredictorService(settings))


if __name__ == "__main__":
    main()
