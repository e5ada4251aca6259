"""Prometheus metrics of the predictor, on a per-instance registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class PredictorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "headroom_predictor_requests",
            "Predict requests answered, by reply status (ok, not_ready, error)",
            ["status"],
            registry=r,
        )
        self.request_errors = Counter(
            "headroom_predictor_request_errors",
            "Predict requests answered with status error, by reason",
            ["reason"],
            registry=r,
        )
        self.rows = Counter("headroom_predictor_rows", "Feature rows predicted", registry=r)
        self.predict_seconds = Histogram(
            "headroom_predictor_predict_seconds",
            "Time to predict one request's batch of rows",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.batch_requests = Histogram(
            "headroom_predictor_batch_requests",
            "Requests answered by one prediction call (everything queued since the last one)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.queued_requests = Gauge(
            "headroom_predictor_queued_requests",
            "Requests received and waiting for the next prediction call",
            registry=r,
        )
        self.model_loads = Counter(
            "headroom_predictor_model_loads",
            "Model version loads by result (ok, refused, error)",
            ["result"],
            registry=r,
        )
        self.model_refusals = Counter(
            "headroom_predictor_model_refusals",
            "Model versions refused (the last good model stays in service), by reason "
            "(checksum, feature_schema, bad_meta, missing_blob, missing_target, unservable...)",
            ["reason"],
            registry=r,
        )
        self.model_info = Gauge(
            "headroom_predictor_model_info",
            "1 for the model version currently served",
            ["version"],
            registry=r,
        )

    def set_version(self, version: str) -> None:
        self.model_info.clear()
        self.model_info.labels(version=version).set(1)
