"""Gateway settings (env prefix ``HEADROOM_GATEWAY_``; connection settings are common)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from shared.settings import CommonSettings


class GatewaySettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_GATEWAY_", extra="ignore", populate_by_name=True
    )

    host: str = Field("127.0.0.1", description="Bind address of the OpenAI API")
    port: int = Field(8080, ge=0, le=65535, description="Port of the OpenAI API (0 = any free)")
    predict_timeout_ms: float = Field(
        100.0,
        gt=0,
        description="Deadline of one prediction request to the predictors (the profile's "
        "producer budgetMs caps it further)",
    )
    predict_breaker_failures: int = Field(
        3,
        ge=0,
        description="Consecutive failed prediction calls (timeouts, errors) after which calls "
        "are skipped while the predictors are down, with a background probe (0: never skip)",
    )
    predict_breaker_open_s: float = Field(
        0.5, gt=0, description="Skip prediction calls this long before the first probe"
    )
    predict_breaker_max_open_s: float = Field(
        4.0, gt=0, description="Longest wait between probes while the predictors stay down"
    )
    stale_after_s: float = Field(
        2.0, gt=0, description="A pod record older than this uses the gateway's own counts"
    )
    scrape_misses_tolerated: int = Field(
        3,
        ge=0,
        description="Consecutive failed scrapes (timeouts and other errors, not connection "
        "failures) through which a ready pod that served this gateway recently stays "
        "routable on the gateway's own counts",
    )
    served_recently_s: float = Field(
        10.0,
        ge=0,
        description="A pod served recently when one of its requests decodes now or had its "
        "first token within this many seconds (for scrape_misses_tolerated)",
    )
    nats_outage_grace_s: float = Field(
        60.0,
        ge=0,
        description="Readiness (/readyz) stays true this long while NATS is down, if the "
        "gateway has a ready pod record to route on",
    )
    drain_unready_s: float = Field(
        1.0,
        ge=0,
        description="On SIGTERM: readiness turns false and new requests get 503 draining "
        "for this long, then the listener closes (new connections are refused)",
    )
    drain_timeout_s: float = Field(
        60.0,
        gt=0,
        description="On SIGTERM: how long running requests may take to finish once the "
        "listener is closed; what runs after that is cut",
    )
    prefix_block_tokens: int = Field(
        64,
        ge=1,
        description="Tokens per prefix-index block (a prompt's blocks are recorded on its pod "
        "when the request is sent, as the Inference Extension's prefix plugin does, and "
        "forgotten if the pod fails it before its first byte)",
    )
    prefix_index_blocks: int = Field(
        50_000,
        ge=1,
        description="Capacity of each pod's prefix-index LRU, in blocks, for pods that do "
        "not report their KV-cache capacity (or with auto capacity off)",
    )
    prefix_index_auto_capacity: bool = Field(
        True,
        description="Size each pod's prefix-index LRU from its reported KV-cache capacity "
        "(vLLM cache_config_info), like the Inference Extension's autoTune",
    )
    pod_connect_timeout_s: float = Field(2.0, gt=0, description="TCP connect timeout to a pod")
    pod_read_timeout_s: float = Field(
        300.0, gt=0, description="Longest silence tolerated while reading a pod's stream"
    )
    pod_first_byte_timeout_s: float = Field(
        10.0,
        ge=0,
        description="A pod that sends no response head this long after the request is "
        "treated as failed before the first byte (retried on the next-ranked pod; 0: only "
        "the read timeout)",
    )
    pod_eject_s: float = Field(
        5.0,
        ge=0,
        description="A pod whose request failed (before the first byte or mid-stream) is left "
        "out of routing this long, doubling with each further failure up to "
        "POD_EJECT_MAX_S; a success ends it (0: never)",
    )
    pod_eject_max_s: float = Field(60.0, ge=0, description="Longest ejection of a failing pod")
    pod_eject_max_fraction: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="At most this fraction of a request's candidate pods is left out for "
        "failures at once (like Envoy's max_ejection_percent); beyond it the pods with the "
        "longest ejections stay out and the others are routed to again",
    )
    retry_before_first_byte: bool = Field(
        True, description="Retry once on the next-ranked pod when a pod fails before any byte"
    )
    retry_after_s: int = Field(1, ge=0, description="Retry-After header value of 503 replies")
    default_max_tokens: int = Field(
        256, ge=1, description="Decode budget assumed for in-flight accounting without max_tokens"
    )
    sample_publish_timeout_s: float = Field(
        5.0, gt=0, description="JetStream publish timeout of one training sample"
    )
    sample_linger_ms: float = Field(
        50.0, ge=0, description="Training samples are buffered this long and published together"
    )
    sample_max_batch: int = Field(
        256, ge=1, description="A buffer of this many training samples is published at once"
    )
    pod_allow_cidrs: str = Field(
        "",
        description="Comma-separated CIDRs: a pod whose URL host is an IP inside one may be "
        "routed to (pod allowlist; empty with the other two empty: any pod a snapshot names)",
    )
    pod_allow_urls: str = Field(
        "", description="Comma-separated pod base URLs that may be routed to (pod allowlist)"
    )
    pod_allow_k8s_label_selector: str = Field(
        "",
        description="Pod allowlist from the gateway's own Kubernetes watch: pods with this "
        "label selector (the collector's) may be routed to",
    )
    pod_allow_k8s_namespace: str = Field(
        "", description="Namespace of that watch (default: the gateway's own)"
    )
    pod_allow_k8s_port: int = Field(
        8000, ge=1, le=65535, description="Port of the pod URLs the watch admits"
    )
    pod_allow_k8s_scheme: str = Field("http", description="Scheme of the pod URLs it admits")
    pod_allow_k8s_api_url: str = Field(
        "", description="Kubernetes API URL of that watch (default: in-cluster, then kubeconfig)"
    )
    sample_max_pending: int = Field(
        20_000,
        ge=1,
        description="Training samples buffered or awaiting their JetStream ack at most; "
        "past it (a long NATS outage) new samples are dropped and counted as failed",
    )
    profiles_path: str = Field(
        "", description="Scheduling profiles YAML file (empty: the shipped profiles.yaml)"
    )
    profile: str = Field("headroom", description="Active scheduling profile (a name in the file)")
    privileged_headers: Literal["allow", "ignore", "reject"] = Field(
        "allow",
        description="Without a key file: who may use x-headroom-profile, x-headroom-priority "
        "and x-headroom-debug. allow: anyone; ignore: the headers are dropped; reject: 403 "
        "(with a key file each key's policy decides)",
    )
    # --- request limits (services/gateway/limits.py) -------------------------------------
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest request body accepted; larger ones get 413 (told by "
        "content-length: before any of it is read)",
    )
    max_json_depth: int = Field(
        64,
        ge=2,
        le=250,
        description="Deepest nesting of JSON objects/arrays accepted in a request body (400 "
        "beyond; at most 250, below orjson's own limits)",
    )
    max_n: int = Field(128, ge=1, description="Largest 'n' (choices per prompt) accepted")
    max_batch_prompts: int = Field(
        2048,
        ge=1,
        description="Most prompts in one completions 'prompt' list or embeddings 'input' list",
    )
    default_context_length: int = Field(
        1_048_576,
        ge=1,
        description="Context length (prompt + max_tokens) assumed for pods that report none "
        "(vLLM reports max_model_len in /v1/models; the collector reads it)",
    )
    offload_bytes: int = Field(
        32 * 1024,
        ge=0,
        description="Request bodies larger than this are decoded and tokenized in the offload "
        "thread, off the event loop",
    )
    offload_threads: int = Field(
        1, ge=1, le=8, description="Threads that decode and tokenize large request bodies"
    )
    api_keys_path: str = Field(
        "",
        description="Client API key file (YAML/JSON, `headroom keys`); empty: no client keys",
    )
    api_keys_reload_s: float = Field(
        1.0, gt=0, description="How often the key file and the pod key file are checked for changes"
    )
    pod_auth: Literal["forward", "inject", "none"] = Field(
        "forward",
        description="Authorization sent to the pods: forward (the client's header), inject "
        "(the pool's pod key) or none; forward is refused together with a key file",
    )
    pod_api_key_file: str = Field(
        "", description="File holding the pool's pod API key (pod_auth=inject; re-read on change)"
    )
    pod_api_key: SecretStr = Field(
        SecretStr(""), description="The pool's pod API key itself (pod_auth=inject; never logged)"
    )
    ratelimit_on_redis_error: Literal["allow", "reject"] = Field(
        "allow",
        description="Rate-limit check when Redis fails: allow (fail open, counted and logged) "
        "or reject (503)",
    )
    ratelimit_timeout_ms: float = Field(
        100.0, gt=0, description="Deadline of one Redis rate-limit call (then on_redis_error)"
    )
    ratelimit_retry_s: float = Field(
        1.0, ge=0, description="After a Redis failure, rate limits are not checked for this long"
    )
    debug_tracemalloc: int = Field(
        0,
        ge=0,
        le=64,
        description="Diagnostics (slow): trace allocations with this many frames and serve "
        "/debug/tracemalloc (diffs since POST /debug/tracemalloc/mark) to loopback clients; "
        "0: off",
    )

    @model_validator(mode="after")
    def _pod_auth_with_keys(self) -> GatewaySettings:
        if self.api_keys_path and self.pod_auth == "forward":
            raise ValueError(
                "pod_auth=forward would send the clients' Headroom API keys to the pods: with "
                "a key file set HEADROOM_GATEWAY_POD_AUTH=inject (and a pod key) or none"
            )
        return self
