"""Settings base shared by every service.

Each service subclasses :class:`CommonSettings` with its own env prefix
(``HEADROOM_GATEWAY_``, ``HEADROOM_PREDICTOR_`` ...). The connection settings that every
service needs are read from un-prefixed ``HEADROOM_*`` variables so one environment
configures the whole stack. Nothing is read at import time: settings are built by the
service's entry point (or a test) by calling the class.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def _common(name: str, default, description: str, **constraints):
    return Field(
        default,
        validation_alias=AliasChoices(name, f"HEADROOM_{name.upper()}"),
        description=description,
        **constraints,
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

    # --- bus security (shared/bus.py builds every connection from these; never logged) ---
    nats_user: str = _common("nats_user", "", "NATS user (user/password authentication)")
    nats_password: SecretStr = _common("nats_password", SecretStr(""), "NATS password")
    nats_token: SecretStr = _common("nats_token", SecretStr(""), "NATS authentication token")
    nats_nkey_seed_file: str = _common(
        "nats_nkey_seed_file", "", "File holding this service's NATS nkey seed (SU...)"
    )
    nats_creds_file: str = _common(
        "nats_creds_file", "", "NATS credentials file (user JWT and nkey seed, decentralised auth)"
    )
    nats_tls_ca_file: str = _common(
        "nats_tls_ca_file", "", "CA bundle that signs the NATS server's certificate (turns TLS on)"
    )
    nats_tls_cert_file: str = _common(
        "nats_tls_cert_file", "", "Client certificate for NATS mutual TLS (turns TLS on)"
    )
    nats_tls_key_file: str = _common("nats_tls_key_file", "", "Key of the NATS client certificate")
    nats_tls_hostname: str = _common(
        "nats_tls_hostname", "", "Name to verify the NATS server's certificate against"
    )
    redis_timeout_s: float = _common(
        "redis_timeout_s",
        10.0,
        "Seconds a Redis command may wait for its reply before it fails (and is retried by "
        "the caller's next check): a Redis that stops answering on an open connection must "
        "not hang a model load or a version check",
        gt=0.0,
    )
    redis_username: str = _common("redis_username", "", "Redis ACL user (Redis 6+)")
    redis_password: SecretStr = _common("redis_password", SecretStr(""), "Redis password")
    redis_tls_ca_file: str = _common(
        "redis_tls_ca_file",
        "",
        "CA bundle that signs the Redis server's certificate (turns TLS on)",
    )
    redis_tls_cert_file: str = _common(
        "redis_tls_cert_file", "", "Client certificate for Redis mutual TLS (turns TLS on)"
    )
    redis_tls_key_file: str = _common(
        "redis_tls_key_file", "", "Key of the Redis client certificate"
    )
