"""Entry point: ``python -m services.trainer`` (the ``headroom trainer`` command)."""

from __future__ import annotations

from services.trainer.service import TrainerService
from services.trainer.settings import TrainerSettings
from shared.runner import run_service


def main(argv: list[str] | None = None) -> None:
    settings = TrainerSettings()
    run_service("trainer", settings.log_level, lambda: TrainerService(settings))


if __name__ == "__main__":
    main()
