"""Prometheus metrics of one gateway instance (own CollectorRegistry, no module globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.gateway.scheduling.plugin import Plugin
from services.gateway.scheduling.scheduler import PluginTimer

_LATENCY_BUCKETS = (
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
_TPOT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
_PREDICT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
_PLUGIN_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2)


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.prediction_mape = Gauge(
            "headroom_gateway_prediction_mape",
            "Rolling MAPE of the chosen pod's prediction against the measured latency",
            ["target"], registry=r,
        )  # fmt: skip
        self.requests = Counter(
            "headroom_gateway_requests", "Requests answered, by endpoint and HTTP status",
            ["endpoint", "status"], registry=r,
        )  # fmt: skip
        self.routing = Counter(
            "headroom_gateway_routing",
            "Routing decisions by what ranked the pods (path predicted|cost-model|heuristic|"
            "fallback), reason ok or the fallback reason",
            ["path", "reason"], registry=r,
        )  # fmt: skip
        self.predict_seconds = Histogram(
            "headroom_gateway_predict_seconds", "Duration of the prediction call",
            buckets=_PREDICT_BUCKETS, registry=r,
        )  # fmt: skip
        self.failed = Counter(
            "headroom_gateway_requests_failed", "Requests that failed (never sampled), by reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.retries = Counter(
            "headroom_gateway_retries", "Attempts retried on the next pod, by failure reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.samples_published = Counter(
            "headroom_gateway_samples_published", "Training samples acknowledged by JetStream",
            registry=r,
        )  # fmt: skip
        self.samples_failed = Counter(
            "headroom_gateway_samples_failed", "Training samples that could not be published",
            registry=r,
        )  # fmt: skip
        self.pods = Gauge(
            "headroom_gateway_pods",
            "Pods in the latest snapshot by state (ready|not_ready|stale|missed: ready ones "
            "kept routable through missed scrapes)",
            ["state"], registry=r,
        )  # fmt: skip
        self.prefix_index_blocks = Gauge(
            "headroom_gateway_prefix_index_blocks",
            "Prefix-index blocks held over every pod (held), and its bound (capacity: the sum "
            "of the pods' LRU capacities; ~140 bytes per block)",
            ["kind"], registry=r,
        )  # fmt: skip
        self.snapshots = Counter("headroom_gateway_snapshots", "Pod snapshots applied", registry=r)
        self.snapshots_invalid = Counter(
            "headroom_gateway_snapshots_invalid", "Pod snapshot messages dropped, by reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.pod_ejections = Counter(
            "headroom_gateway_pod_ejections",
            "Pods left out of routing for a while after a failed request, by failure reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.pods_busy = Counter(
            "headroom_gateway_pod_connects_busy",
            "Connects to a pod that timed out while the pod was sending data on other "
            "connections (alive, slow to accept: retried, not ejected)",
            registry=r,
        )
        self.pods_refused = Counter(
            "headroom_gateway_snapshot_pods_refused",
            "Pods named by a pod snapshot that the pod allowlist does not admit (the snapshot "
            "is dropped), by reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "headroom_gateway_in_flight_requests", "Requests being proxied", registry=r
        )
        self.queued = Gauge(
            "headroom_gateway_queued_requests",
            "Requests waiting in the gateway's flow-control queue, by profile",
            ["profile"], registry=r,
        )  # fmt: skip
        self.queue_wait = Histogram(
            "headroom_gateway_queue_wait_seconds",
            "Time requests waited in the flow-control queue (released ones), by release reason",
            ["reason"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.queue_rejected = Counter(
            "headroom_gateway_queue_rejected",
            "Requests refused because the flow-control queue was full (503)",
            ["profile"], registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            "inference_objective_request_ttft_seconds",
            "Observed time to first token at the pod: from the successful attempt's dispatch "
            "to its first token (what the models learn)",
            ["model_name"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.client_ttft = Histogram(
            "headroom_gateway_client_ttft_seconds",
            "Time to first token as the client sees it: from the request's arrival at the "
            "gateway to its first token being sent (streaming) or reaching the gateway "
            "(non-streaming); SLO violations are judged on it",
            ["model_name"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self._client_ttft: dict[str, object] = {}
        self.client_disconnects = Counter(
            "headroom_gateway_client_disconnects",
            "Clients that went away before their response was complete, by stage "
            "(body|routing|queued|first_token|streaming|generating)",
            ["stage"], registry=r,
        )  # fmt: skip
        self.predicted_ttft = Histogram(
            "inference_objective_request_predicted_ttft_seconds",
            "Predicted time to first token of the chosen pod",
            ["model_name"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.tpot = Histogram(
            "inference_objective_request_tpot_seconds", "Observed time per output token",
            ["model_name"], buckets=_TPOT_BUCKETS, registry=r,
        )  # fmt: skip
        self.predicted_tpot = Histogram(
            "inference_objective_request_predicted_tpot_seconds",
            "Predicted time per output token of the chosen pod",
            ["model_name"], buckets=_TPOT_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft_slo_violations = Counter(
            "inference_objective_request_ttft_slo_violation",
            "Requests whose client-side TTFT (headroom_gateway_client_ttft_seconds) exceeded "
            "their TTFT SLO header",
            ["model_name"], registry=r,
        )  # fmt: skip
        self.slo_violations = Counter(
            "inference_objective_request_slo_violation",
            "Requests that missed an SLO header, by type (ttft: the client-side TTFT; tpot)",
            ["model_name", "type"], registry=r,
        )  # fmt: skip
        self.limit_rejections = Counter(
            "headroom_gateway_limit_rejections",
            "Requests refused by a request limit before reaching a pod (400/413), by limit "
            "(body_size|json_depth|n|batch|context_length|max_tokens)",
            ["limit"], registry=r,
        )  # fmt: skip
        self.offloaded = Gauge(
            "headroom_gateway_offloaded_requests",
            "Requests whose body is being decoded or tokenized in the offload thread (or "
            "waiting for it)",
            registry=r,
        )
        self.shed = Counter(
            "headroom_gateway_requests_shed",
            "Requests refused with 503 by an admitter, by reason",
            ["model_name", "reason"], registry=r,
        )  # fmt: skip
        self.schedule_seconds = Histogram(
            "headroom_gateway_scheduler_duration_seconds",
            "Duration of one scheduling cycle (all plugins of the profile)",
            ["profile"], buckets=_PLUGIN_BUCKETS, registry=r,
        )  # fmt: skip
        self.plugin_seconds = Histogram(
            "headroom_gateway_scheduler_plugin_duration_seconds",
            "Duration of one plugin call, by plugin kind, type and name",
            ["kind", "plugin_type", "plugin_name"], buckets=_PLUGIN_BUCKETS, registry=r,
        )  # fmt: skip
        self._plugin_children: dict[Plugin, object] = {}
        self.model_version_info = Gauge(
            "headroom_gateway_model_version_info",
            "1 for the model version the predictors last answered with",
            ["version"], registry=r,
        )  # fmt: skip

    def observe_client_ttft(self, model: str, seconds: float) -> None:
        """``client_ttft`` with its child per model kept (on the streaming hot path)."""
        child = self._client_ttft.get(model)
        if child is None:
            child = self._client_ttft[model] = self.client_ttft.labels(model)
        child.observe(seconds)  # type: ignore[attr-defined]

    def set_model_version(self, version: str) -> None:
        self.model_version_info.clear()
        self.model_version_info.labels(version=version).set(1)

    def _observe_plugin(self, plugin: Plugin, seconds: float) -> None:
        child = self._plugin_children.get(plugin)
        if child is None:
            child = self.plugin_seconds.labels(plugin.KIND, plugin.TYPE, plugin.name)
            self._plugin_children[plugin] = child
        child.observe(seconds)  # type: ignore[attr-defined]

    def plugin_timer(self) -> PluginTimer:
        """The scheduler hook that times every plugin call into ``plugin_seconds``."""
        return PluginTimer(self._observe_plugin)
