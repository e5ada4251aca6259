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
            "Samples not added to the window, by reason (schema and validation reasons, "
            "duplicate, expired, flushed)",
            ["reason"],
            registry=r,
        )
        self.model_republished = Counter(
            "headroom_trainer_model_republished",
            "Times the current model version was written back to a Redis that had lost it "
            "(e.g. restarted empty)",
            registry=r,
        )
        self.samples_replayed = Counter(
            "headroom_trainer_samples_replayed",
            "Already-delivered samples read back from the stream into the window at start",
            registry=r,
        )
        self.window_size = Gauge(
            "headroom_trainer_window_size", "Samples currently in the window", registry=r
        )
        self.window_buckets_filled = Gauge(
            "headroom_trainer_window_buckets_filled",
            "Stratum buckets holding at least one sample",
            registry=r,
        )
        self.window_evicted = Counter(
            "headroom_trainer_window_evicted",
            "Samples dropped from the window, by reason (bucket_cap, max_size, age, flush, shift)",
            ["reason"],
            registry=r,
        )
        self.flushes = Counter("headroom_trainer_flushes", "Window flushes requested", registry=r)
        self.shifts = Counter(
            "headroom_trainer_shifts",
            "Workload shifts detected from live TTFT error (older samples forgotten, refit)",
            registry=r,
        )
        self.fits = Counter(
            "headroom_trainer_fits",
            "Fit attempts by result (ok, error, skipped)",
            ["result"],
            registry=r,
        )
        self.candidates = Counter(
            "headroom_trainer_candidates",
            "Training cycles by decision (promote, reject, skip)",
            ["decision"],
            registry=r,
        )
        self.rejections = Counter(
            "headroom_trainer_candidate_rejections",
            "Candidates rejected because this model key was worse than the current model",
            ["target"],
            registry=r,
        )
        self.fit_seconds = Histogram(
            "headroom_trainer_fit_seconds",
            "Wall time of one training cycle (off the event loop)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.model_mape = Gauge(
            "headroom_trainer_model_mape",
            "Holdout MAPE of the latest published version, per model key",
            ["target"],
            registry=r,
        )
        self.model_coverage = Gauge(
            "headroom_trainer_model_coverage",
            "Holdout coverage (share of labels <= prediction) of quantile models",
            ["target"],
            registry=r,
        )
        self.candidate_mape = Gauge(
            "headroom_trainer_candidate_mape",
            "Holdout MAPE of the latest candidate (promoted or not), per model key",
            ["target"],
            registry=r,
        )
        self.live_mape = Gauge(
            "headroom_trainer_live_mape",
            "Rolling MAPE of the predictions the gateway routed with vs measured latency",
            ["target"],
            registry=r,
        )
        self.live_samples = Gauge(
            "headroom_trainer_live_mape_samples",
            "Predictions in the rolling live-MAPE window",
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
