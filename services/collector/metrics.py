"""The collector's own Prometheus metrics (one registry per instance)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.autoscale.signals import STRATEGIES, PoolSignals, Recommendation

_SCRAPE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.scrape_duration = Histogram(
            "headroom_collector_scrape_duration_seconds",
            "Time to fetch and parse one pod's metrics page (failures included)",
            ["pod"],
            buckets=_SCRAPE_BUCKETS,
            registry=r,
        )
        self.scrape_errors = Counter(
            "headroom_collector_scrape_errors",
            "Failed scrapes by pod and reason (timeout, connect, http_status, too_large, "
            "no_metrics, parse, other)",
            ["pod", "reason"],
            registry=r,
        )
        self.pods_ready = Gauge(
            "headroom_collector_pods_ready",
            "Pods published with ready=true in the last snapshot",
            registry=r,
        )
        self.staleness = Gauge(
            "headroom_collector_pod_staleness_seconds",
            "Age of each pod's record in the last snapshot (now - scraped_at): grows while a "
            "pod's scrapes fail or hang",
            ["pod"],
            registry=r,
        )
        self.pods_total = Gauge("headroom_collector_pods", "Pods in the last snapshot", registry=r)
        self.parse_ignored = Counter(
            "headroom_collector_parse_ignored_lines",
            "Malformed or unusable metric lines ignored by the parser",
            registry=r,
        )
        self.snapshots_published = Counter(
            "headroom_collector_snapshots_published",
            "PodSnapshot messages published",
            registry=r,
        )
        self.publish_errors = Counter(
            "headroom_collector_publish_errors",
            "PodSnapshot publications that failed",
            registry=r,
        )
        self.cycle_duration = Histogram(
            "headroom_collector_cycle_duration_seconds",
            "Time from the start of a scrape cycle to its snapshot being published",
            buckets=_SCRAPE_BUCKETS,
            registry=r,
        )

        # Autoscaling signals per pool (HPA reads them as External metrics)
        self.pool_replicas = Gauge(
            "headroom_pool_replicas", "Pods discovered in the pool", ["pool"], registry=r
        )
        self.pool_ready = Gauge(
            "headroom_pool_ready_replicas",
            "Pods of the pool whose last scrape succeeded",
            ["pool"],
            registry=r,
        )
        self.pool_signal = {
            s.name: Gauge(s.gauge, s.description, ["pool"], registry=r) for s in STRATEGIES.values()
        }
        self.recommended = Gauge(
            "headroom_autoscale_recommended_replicas",
            "Replicas an HPA on this strategy's signal would reach (HPA formula, tolerance, "
            "stabilisation windows, rate limits; collector's targets)",
            ["pool", "strategy"],
            registry=r,
        )

    def set_pool_signals(
        self, pool: str, signals: PoolSignals, recs: Sequence[Recommendation]
    ) -> None:
        """Set the pool's gauges; a signal no ready pod reports is removed (not exported)."""
        self.pool_replicas.labels(pool).set(signals.replicas)
        self.pool_ready.labels(pool).set(signals.ready)
        for name, gauge in self.pool_signal.items():
            value = signals.value(name)
            if value is None:
                _remove(gauge, pool)
            else:
                gauge.labels(pool).set(value)
        for rec in recs:
            if rec.decision is None:
                _remove(self.recommended, pool, rec.strategy)
            else:
                self.recommended.labels(pool, rec.strategy).set(rec.decision.recommended)

    def forget_pod(self, pod: str, reasons: set[str]) -> None:
        """Drop the label children of a pod that left discovery."""
        _remove(self.scrape_duration, pod)
        _remove(self.staleness, pod)
        for reason in reasons:
            try:
                self.scrape_errors.remove(pod, reason)
            except KeyError:
                pass


def _remove(metric: Gauge | Histogram, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
