"""Pool-level autoscaling signals and the three strategies of the GKE guidance (pure).

=================  ==========================================  ==============  =============
strategy           signal (per pool)                           default target  optimises
=================  ==========================================  ==============  =============
prefill-backlog    queued prefill requests per ready replica   5               throughput
slots-used         batch-slot fullness, mean over ready pods   0.9             latency
kv-usage           KV-cache / HBM usage, mean over ready pods  0.8             utilisation
=================  ==========================================  ==============  =============

The collector exports each signal as a gauge labelled by pool (``headroom_pool_*``) and HPA
reads it as an External metric with a ``Value`` target, so ``desired = ceil(current x signal /
target)`` (:mod:`services.autoscale.hpa`). A signal no ready pod reports is None (not
exported; HPA then keeps the replica count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.autoscale.hpa import Behavior, Decision, Stabilizer


@dataclass(frozen=True, slots=True)
class PodLoad:
    """The load fields of one pod that the signals need."""

    ready: bool
    prefill_backlog: float | None = None
    slots_used: float | None = None  # 0..1
    kv_usage: float | None = None  # 0..1


@dataclass(frozen=True, slots=True)
class PoolSignals:
    replicas: int  # pods in the pool (discovered)
    ready: int  # pods whose last scrape succeeded
    prefill_backlog_per_replica: float | None
    slots_used: float | None
    kv_usage: float | None

    def value(self, strategy: str) -> float | None:
        return getattr(self, STRATEGIES[strategy].signal)


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    signal: str  # PoolSignals attribute
    gauge: str  # the collector's Prometheus gauge
    default_target: float
    description: str


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "prefill-backlog",
            "prefill_backlog_per_replica",
            "headroom_pool_prefill_backlog_per_replica",
            5.0,
            "queued prefill requests per ready replica (throughput)",
        ),
        Strategy(
            "slots-used",
            "slots_used",
            "headroom_pool_slots_used_percentage",
            0.9,
            "batch-slot fullness, fraction 0..1 (latency)",
        ),
        Strategy(
            "kv-usage",
            "kv_usage",
            "headroom_pool_kv_usage",
            0.8,
            "KV-cache / HBM usage, fraction 0..1 (utilisation)",
        ),
    )
}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pool_signals(pods: Iterable[PodLoad]) -> PoolSignals:
    pods = list(pods)
    ready = [p for p in pods if p.ready]
    backlogs = [p.prefill_backlog for p in ready if p.prefill_backlog is not None]
    return PoolSignals(
        replicas=len(pods),
        ready=len(ready),
        prefill_backlog_per_replica=sum(backlogs) / len(ready) if backlogs else None,
        slots_used=_mean([p.slots_used for p in ready if p.slots_used is not None]),
        kv_usage=_mean([p.kv_usage for p in ready if p.kv_usage is not None]),
    )


@dataclass(slots=True)
class Recommendation:
    strategy: str
    value: float | None
    target: float
    decision: Decision | None  # None when the signal is unavailable


class Recommender:
    """One HPA stabiliser per strategy; :meth:`update` gives each strategy's recommendation."""

    def __init__(
        self, targets: Mapping[str, float] | None = None, behavior: Behavior | None = None
    ) -> None:
        targets = dict(targets or {})
        unknown = set(targets) - set(STRATEGIES)
        if unknown:
            raise ValueError(f"unknown strategies {sorted(unknown)}; known: {sorted(STRATEGIES)}")
        self.targets = {n: targets.get(n, s.default_target) for n, s in STRATEGIES.items()}
        for n, t in self.targets.items():
            if not t > 0:
                raise ValueError(f"target of {n} must be positive")
        self.behavior = behavior or Behavior()
        self._stabilizers = {n: Stabilizer(self.behavior) for n in STRATEGIES}

    def update(
        self, now: float, signals: PoolSignals, current: int | None = None
    ) -> list[Recommendation]:
        """``current`` defaults to the pool's replica count."""
        cur = signals.replicas if current is None else current
        out = []
        for name in STRATEGIES:
            value, target = signals.value(name), self.targets[name]
            decision = None
            if value is not None:
                decision = self._stabilizers[name].recommend(now, cur, value, target)
            out.append(Recommendation(name, value, target, decision))
        return out
