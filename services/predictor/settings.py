"""Predictor settings (env prefix ``HEADROOM_PREDICTOR_``; connection settings are common)."""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.settings import CommonSettings


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class PredictorSettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_PREDICTOR_", extra="ignore", populate_by_name=True
    )

    admin_host: str = Field("127.0.0.1", description="Bind address of /health and /metrics")
    admin_port: int = Field(9102, ge=0, le=65535, description="Admin port (0 = any free port)")
    replica_id: str = Field(
        default_factory=default_replica_id, description="Name put in every reply's `replica`"
    )
    reload_interval_s: float = Field(
        2.0, gt=0, description="Seconds between checks of the current version in Redis"
    )
    objective: Literal["mean", "quantile"] = Field(
        "mean", description="Which models answer when a version has mean and quantile ones"
    )
    inline_max_rows: int = Field(
        256,
        ge=1,
        description="Batches with more rows are predicted in a worker thread (the event loop "
        "keeps answering NATS and /health meanwhile)",
    )
    max_batch_rows: int = Field(
        16384,
        ge=1,
        description="Most rows predicted in one call; requests queued beyond it wait for the "
        "next call (a larger request is predicted alone)",
    )
