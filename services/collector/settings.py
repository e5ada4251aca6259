"""Collector settings (env prefix ``HEADROOM_COLLECTOR_``; pool, namespace and NATS URL come
from the un-prefixed common settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.collector.discovery import PodTarget, parse_pod_list
from services.collector.parsers import PARSERS
from shared.pod_credentials import PodCredentials
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
    model_info_path: str = Field(
        "/v1/models",
        description="Path of the pods' OpenAI model list, read for each pod's context length "
        "(max_model_len) (empty: not read)",
    )
    model_info_refresh_s: float = Field(
        60.0, gt=0, description="How often each pod's model list is read again"
    )
    pod_api_key_file: str = Field(
        "",
        description="File holding the pods' API key, sent on the model-list request (pods "
        "started with --api-key protect /v1/models; re-read on change)",
    )
    pod_api_key: SecretStr = Field(
        SecretStr(""), description="The pods' API key itself (never logged); or use the file"
    )

    def pod_credentials(self) -> PodCredentials:
        """What the model-list request presents: the pod key if one is configured."""
        key = self.pod_api_key.get_secret_value()
        mode = "inject" if key or self.pod_api_key_file else "none"
        return PodCredentials(mode, key, self.pod_api_key_file, "HEADROOM_COLLECTOR_")

    admin_host: str = Field("127.0.0.1", description="Admin server (/health, /metrics) host")
    admin_port: int = Field(9101, ge=0, le=65535, description="Admin server port")
    engine: str = Field(
        "vllm", description="Model-server engine (selects the parser): vllm, jetstream, sglang, tgi"
    )
    discovery: Literal["static", "kubernetes"] = Field(
        "static", description="Pod discovery: the static PODS list or a Kubernetes label watch"
    )
    k8s_namespace: str = Field(
        "", description="Namespace of the model-server pods (empty: the collector's own)"
    )
    k8s_label_selector: str = Field(
        "", description='Label selector of the pool\'s pods, e.g. "app=vllm-llama3-8b"'
    )
    k8s_hardware_class_label: str = Field(
        "headroom.dev/hardware-class",
        description="Pod label holding the pod's hardware class (e.g. nvidia-h100-80gb): the "
        "gateway keeps one prefill cost model per class; empty: not read (a pod's "
        "headroom_hardware_info metric, where it has one, still names it)",
    )
    k8s_target_port: int = Field(8000, ge=1, le=65535, description="Port scraped on each pod IP")
    k8s_metrics_port: int = Field(
        0, ge=0, le=65535, description="Port of the pods' /metrics when not the target port"
    )
    k8s_scheme: Literal["http", "https"] = Field("http", description="Scheme of the pod URLs")
    k8s_api_url: str = Field(
        "", description="API server URL (empty: in-cluster service account, else kubeconfig)"
    )
    k8s_watch_timeout_s: int = Field(
        300, ge=1, description="Server-side timeout of one watch request (then re-watch)"
    )
    max_batch_slots: int = Field(
        0,
        ge=0,
        description="Batch slots per pod (max_num_seqs) to derive slots used from running "
        "requests where the engine does not export it (0: unknown)",
    )
    autoscale_target_prefill_backlog: float = Field(
        5.0, gt=0, description="Target prefill backlog per replica (prefill-backlog strategy)"
    )
    autoscale_target_slots_used: float = Field(
        0.9, gt=0, description="Target slots-used fraction (slots-used strategy)"
    )
    autoscale_target_kv_usage: float = Field(
        0.8, gt=0, description="Target KV/HBM usage fraction (kv-usage strategy)"
    )
    autoscale_min_replicas: int = Field(1, ge=1, description="HPA minReplicas for recommendations")
    autoscale_max_replicas: int = Field(
        100, ge=1, description="HPA maxReplicas for recommendations"
    )
    autoscale_tolerance: float = Field(0.1, ge=0, description="HPA tolerance band")
    autoscale_scale_up_window_s: float = Field(
        0.0, ge=0, description="HPA scale-up stabilisation window"
    )
    autoscale_scale_down_window_s: float = Field(
        300.0, ge=0, description="HPA scale-down stabilisation window"
    )

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

    @field_validator("model_info_path")
    @classmethod
    def _info_path(cls, v: str) -> str:
        return v if not v or v.startswith("/") else "/" + v

    @model_validator(mode="after")
    def _discovery_needs(self) -> CollectorSettings:
        if self.discovery == "kubernetes" and not self.k8s_label_selector.strip():
            raise ValueError("discovery=kubernetes needs HEADROOM_COLLECTOR_K8S_LABEL_SELECTOR")
        if self.autoscale_min_replicas > self.autoscale_max_replicas:
            raise ValueError("autoscale_min_replicas must not exceed autoscale_max_replicas")
        return self

    def pod_targets(self) -> list[PodTarget]:
        return parse_pod_list(self.pods)
