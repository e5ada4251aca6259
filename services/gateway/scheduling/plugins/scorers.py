"""Heuristic scorers used by the baseline profiles (all scores in 0..1, higher is better)."""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import Scorer


def inverse_minmax(xs: list[float]) -> list[float]:
    """1 for the smallest value, 0 for the largest; 1 for all when they are equal."""
    lo, hi = min(xs), max(xs)
    if hi <= lo:
        return [1.0] * len(xs)
    span = hi - lo
    return [(hi - x) / span for x in xs]


class QueueScorer(Scorer):
    """Gateway API Inference Extension's queue scorer: shortest queue (scraped waiting plus
    requests dispatched since the scrape) scores 1, longest 0."""

    TYPE = "queue-scorer"
    DOC = "Shortest waiting queue scores highest (min-max over the candidates)."

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        return inverse_minmax([p.waiting for p in pods])


class KvCacheUtilizationScorer(Scorer):
    TYPE = "kv-cache-utilization-scorer"
    DOC = "Free KV cache: 1 - KV-cache utilisation."

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        return [1.0 - min(1.0, max(0.0, p.kv_usage)) for p in pods]


class PrefixScorer(Scorer):
    TYPE = "prefix-scorer"
    DOC = "Fraction of the prompt's prefix blocks the pod is believed to hold."

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        return [p.prefix_score for p in pods]


class LeastRequestScorer(Scorer):
    TYPE = "least-request-scorer"
    DOC = "Fewest requests in flight from this gateway scores highest."

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        return inverse_minmax([float(p.in_flight) for p in pods])


class CacheAwareScorer(Scorer):
    """SGLang router "cache_aware": when load is imbalanced (max - min in-flight requests >
    ``balanceAbsThreshold`` and max > ``balanceRelThreshold`` x min) the least-loaded pod wins;
    otherwise the best prefix match wins if its match ratio > ``cacheThreshold``, else the pod
    with the smallest prefix tree (fewest cached blocks in the prefix index). Pair it with the
    max-score picker (ties broken at random)."""

    TYPE = "cache-aware-scorer"
    DOC = (
        "SGLang cache_aware: balance load when imbalanced, else prefix match, else emptiest cache."
    )
    PARAMS = (
        Param("balanceAbsThreshold", float, 32.0, "Imbalance needs max - min in-flight "
              "requests above this", lo=0.0),
        Param("balanceRelThreshold", float, 1.1, "... and max above this multiple of min",
              lo=1.0),
        Param("cacheThreshold", float, 0.5, "Route to the best prefix match only if its "
              "match ratio exceeds this", lo=0.0, hi=1.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.abs_th: float = params["balanceAbsThreshold"]
        self.rel_th: float = params["balanceRelThreshold"]
        self.cache_th: float = params["cacheThreshold"]

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        loads = [float(p.in_flight) for p in pods]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.abs_th and hi > self.rel_th * lo:
            cycle.notes[self.name] = "balance"
            return inverse_minmax(loads)
        best = max(p.prefix_score for p in pods)
        if best > self.cache_th:
            cycle.notes[self.name] = "prefix"
            return [1.0 if p.prefix_score >= best else 0.0 for p in pods]
        cycle.notes[self.name] = "smallest_tree"
        return inverse_minmax([float(p.cached_blocks) for p in pods])
