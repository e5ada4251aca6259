"""Prometheus metrics of the trainer, on a per-instance registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class TrainerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples_received = Counter(
            "headroom_trainer_samples_received",
            "Valid training samples added to the window",
            registry=r,
        )
        self.samples_rejected = Counter(
            "headroom_trainer_samples_rejected",
            "Samples not added to the window, by reason (schema reasons, duplicate)",
            ["reason"],
            registry=r,
        )
        self.samples_replayed = Counter(
            "headroom_trainer_samples_replayed",
            "Already-acknowledged samples read back from the stream into the window at start",
            registry=r,
        )
        self.window_size = Gauge(
            "headroom_trainer_window_size", "Samples currently in the window", registry=r
        )
        self.fits = Counter(
            "headroom_trainer_fits",
            "Fit attempts by result (ok, error, skipped)",
            ["result"],
            registry=r,
        )
        self.fit_seconds = Histogram(
            "headroom_trainer_fit_seconds",
            "Wall time of fitting all targets (off the event loop)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.model_mape = Gauge(
            "headroom_trainer_model_mape",
            "Holdout MAPE of the latest published version, per target",
            ["target"],
            registry=r,
        )
        self.model_version_info = Gauge(
            "headroom_trainer_model_version_info",
            "1 for the version this trainer published last",
            ["version"],
            registry=r,
        )

    def set_version(self, version: str) -> None:
        self.model_version_info.clear()
        self.model_version_info.labels(version=version).set(1)
