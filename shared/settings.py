"""Settings base shared by every service.

Each service subclasses :class:`CommonSettings` with its own env prefix
(``HEADROOM_GATEWAY_``, ``HEADROOM_PREDICTOR_`` ...). The connection settings that every
service needs are read from un-prefixed ``HEADROOM_*`` variables so one environment
configures the whole stack. Nothing is read at import time: settings are built by the
service's entry point (or a test) by calling the class.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _common(name: str, default, description: str):
    return Field(
        default,
        validation_alias=AliasChoices(name, f"HEADROOM_{name.upper()}"),
        description=description,
    )


class CommonSettings(BaseSettings):
    """Connection and naming settings common to all services."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    nats_url: str = _common("nats_url", "nats://127.0.0.1:4222", "NATS server URL")
    redis_url: str = _common("redis_url", "redis://127.0.0.1:6379/0", "Redis URL")
    namespace: str = _common(
        "namespace",
        "headroom",
        "Prefix of every NATS subject, JetStream stream and Redis key this stack uses",
    )
    pool: str = _common("pool", "default", "Name of the inference pool (group of pods)")
    log_level: str = _common("log_level", "INFO", "Python log level")
