"""Trainer settings (env prefix ``HEADROOM_TRAINER_``; connection settings are common)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.settings import CommonSettings


class TrainerSettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_TRAINER_", extra="ignore", populate_by_name=True
    )

    admin_host: str = Field("127.0.0.1", description="Bind address of /health and /metrics")
    admin_port: int = Field(9104, ge=0, le=65535, description="Admin port (0 = any free port)")
    interval_s: float = Field(10.0, gt=0, description="Seconds between refit checks")
    min_samples: int = Field(100, ge=1, description="Labelled samples a target needs to fit")
    min_new_samples: int = Field(20, ge=0, description="New samples needed since the last fit")
    window_size: int = Field(20000, ge=1, description="Samples kept in the window (oldest out)")
    dedup_size: int = Field(50000, ge=1, description="Recent request ids remembered for dedup")
    keep_versions: int = Field(5, ge=1, description="Model versions kept in Redis")
    fetch_batch: int = Field(256, ge=1, description="Messages per JetStream fetch")
    fetch_timeout_s: float = Field(1.0, gt=0, description="Max wait of one JetStream fetch")
    rounds: int = Field(200, ge=1, description="XGBoost boosting rounds per target")
    replay_on_start: bool = Field(
        True, description="Refill the window from already-acknowledged stream samples at start"
    )
    seed: int = Field(0, description="Seed of the holdout split and XGBoost")
