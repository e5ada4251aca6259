"""Collector settings (env prefix ``HEADROOM_COLLECTOR_``; pool, namespace and NATS URL come
from the un-prefixed common settings)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from services.collector.discovery import PodTarget, parse_pod_list
from services.collector.parsers import PARSERS
from shared.settings import CommonSettings


class CollectorSettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_COLLECTOR_", extra="ignore", populate_by_name=True
    )

    pods: str = Field(
        "",
        description='Static pod list "name=url,name=url" (a bare url is named pod-<i>)',
    )
    scrape_interval_ms: int = Field(100, gt=0, description="Scrape cycle period")
    scrape_timeout_ms: int = Field(1000, gt=0, description="Per-pod scrape timeout")
    metrics_path: str = Field("/metrics", description="Path of the pods' metrics endpoint")
    max_body_bytes: int = Field(8 << 20, gt=0, description="Largest /metrics body accepted")
    admin_host: str = Field("127.0.0.1", description="Admin server (/health, /metrics) host")
    admin_port: int = Field(9101, ge=0, le=65535, description="Admin server port")
    engine: str = Field("vllm", description="Model-server engine (selects the parser)")

    @field_validator("pods")
    @classmethod
    def _pods_parse(cls, v: str) -> str:
        parse_pod_list(v)
        return v

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        if v not in PARSERS:
            raise ValueError(f"unknown engine {v!r}; supported: {', '.join(sorted(PARSERS))}")
        return v

    @field_validator("metrics_path")
    @classmethod
    def _path(cls, v: str) -> str:
        return v if v.startswith("/") else "/" + v

    def pod_targets(self) -> list[PodTarget]:
        return parse_pod_list(self.pods)
