"""Filters: prefix-cache affinity gate, SLO headroom tiers, longest prefix match."""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import Filter


class PrefixCacheAffinityFilter(Filter):
    """Keep only "sticky" pods (prefix score >= threshold) unless exploring or the sticky pods
    are predicted to be much slower than the rest. Usable several times in one profile (the
    upstream chart runs a strict 0.99 gate, then a loose 0.80 one). With ``sloAware`` (ours,
    off upstream) every pod is also kept when no sticky pod is predicted to meet the request's
    SLOs but another pod is: upstream runs affinity before the SLO tiers, so a cached but
    overloaded pod otherwise wins over one that would meet the SLO."""

    TYPE = "prefix-cache-affinity-filter"
    DOC = "Keeps only pods holding the prompt's prefix, with exploration and a TTFT load gate."
    READS_PREDICTIONS = True  # the load gate (maxTTFTPenaltyMs) and sloAware
    PARAMS = (
        Param("threshold", float, 0.80, "Prefix score a pod needs to count as sticky "
              "(0 disables the filter)", lo=0.0, hi=1.0),
        Param("epsilon", float, 0.01, "Probability of keeping every pod (exploration)",
              lo=0.0, hi=1.0),
        Param("maxTTFTPenaltyMs", float, 5000.0, "Keep every pod when the best sticky pod's "
              "predicted TTFT exceeds the best other pod's by more than this", lo=0.0),
        Param("stickyWithoutPredictions", bool, True, "Apply the filter when there are no "
              "predictions (the load gate cannot fire then)"),
        Param("sloAware", bool, False, "Keep every pod when no sticky pod is predicted to meet "
              "the SLOs but another pod is"),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.threshold: float = params["threshold"]
        self.epsilon: float = params["epsilon"]
        self.max_penalty: float = params["maxTTFTPenaltyMs"]
        self.without_predictions: bool = params["stickyWithoutPredictions"]
        self.slo_aware: bool = params["sloAware"]

    def filter(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        if self.threshold <= 0:
            return pods
        th = self.threshold
        sticky = [p for p in pods if p.prefix_score >= th]
        if not sticky or len(sticky) == len(pods):
            return pods
        if not cycle.has_predictions and not self.without_predictions:
            return pods
        if self.epsilon > 0 and cycle.rng.random() < self.epsilon:
            cycle.notes[self.name] = "explore"
            return pods
        if cycle.has_predictions:
            best_sticky = min(p.latency_ms for p in sticky)
            best_other = min(p.latency_ms for p in pods if p.prefix_score < th)
            if best_sticky - best_other > self.max_penalty:
                cycle.notes[self.name] = "load_gate"
                return pods
            if self.slo_aware and not any(p.meets_slo for p in sticky):
                req = cycle.request
                constrained = req.has_slo or any(p.tpot_limited for p in sticky)
                if constrained and any(p.meets_slo for p in pods if p.prefix_score < th):
                    cycle.notes[self.name] = "slo_gate"
                    return pods
        cycle.notes[self.name] = "sticky"
        return sticky


class SloHeadroomTierFilter(Filter):
    """Split pods into those predicted to meet every SLO that applies and the rest; keep the
    meeting tier with probability ``positiveTierProbability``. No-op without predictions or
    when no SLO applies (no header and no TPOT-limited pod)."""

    TYPE = "slo-headroom-tier-filter"
    DOC = "Keeps the pods predicted to meet the SLOs (with a small chance of the others)."
    READS_PREDICTIONS = True
    PARAMS = (
        Param("positiveTierProbability", float, 0.99, "Probability of keeping the tier that "
              "meets the SLOs when both tiers are non-empty", lo=0.0, hi=1.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.p_positive: float = params["positiveTierProbability"]

    def filter(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        if not cycle.has_predictions:
            return pods
        req = cycle.request
        if req.slo_ttft_ms is None and req.slo_tpot_ms is None:
            if not any(p.tpot_limited for p in pods):
                return pods
        positive = [p for p in pods if p.meets_slo]
        if not positive or len(positive) == len(pods):
            return pods
        if cycle.rng.random() < self.p_positive:
            cycle.notes[self.name] = "positive"
            return positive
        cycle.notes[self.name] = "negative"
        return [p for p in pods if not p.meets_slo]


class LongestPrefixFilter(Filter):
    """vLLM production-stack "prefix-aware" routing: keep the pods with the longest prefix
    match (every pod when nobody matches). The production stack matches 128-character chunks
    in a hash trie; here the match is the prefix index's block score (64-token blocks in the
    gateway; the lab chooses its own block size), an approximation of the same idea."""

    TYPE = "longest-prefix-filter"
    DOC = "Keeps the pods with the longest prefix match (vLLM production-stack prefix-aware)."

    def filter(self, cycle: CycleState, pods: list[PodState]) -> list[PodState]:
        best = max((p.prefix_score for p in pods), default=0.0)
        if best <= 0:
            return pods
        return [p for p in pods if p.prefix_score >= best]
