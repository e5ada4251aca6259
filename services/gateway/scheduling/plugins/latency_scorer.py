"""latency-scorer: score pods by predicted SLO headroom (composite fallback without predictions).

With predictions, headroom comes from the producer (budget - prediction; budget 0 without an
SLO, so headroom is then -prediction):
- pods with both headrooms >= 0 ("positive") are the only ones scored when any exist; the two
  headrooms are min-max normalised among them (0.5 when all equal) and blended with
  ``ttftWeight``/``tpotWeight``; ``least`` gives the tightest headroom the highest score
  (bin-packing), ``most`` the largest (spreading). Scores lie in 2/101..1.
- otherwise, with ``preferIdle``, only idle pods are scored when any exist; then only the
  best non-empty bucket is scored: "only TPOT misses", else "only TTFT misses", else "both
  miss". Within it the deficits (-headroom) are min-max normalised (0 when all equal) and
  blended; the smallest blended deficit scores highest (2/101..82/101).
Unscored pods get 0.

Without predictions: the composite fallback, a weighted mean of free KV cache (1 - kv),
relative queue ((maxQ - q) / maxQ, 1 when maxQ is 0) and the prefix score, in 0..1.
"""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState
from services.gateway.scheduling.fallback import composite_values
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import Scorer

_EPS = 1e-9


def _norm(xs: list[float], flat: float) -> list[float]:
    lo, hi = min(xs), max(xs)
    span = hi - lo
    if span <= _EPS:
        return [flat] * len(xs)
    return [(x - lo) / span for x in xs]


class LatencyScorer(Scorer):
    TYPE = "latency-scorer"
    DOC = "Scores pods by predicted SLO headroom; composite load/prefix score without predictions."
    READS_PREDICTIONS = True  # headroom from the producer; composite without predictions
    PARAMS = (
        Param("strategy", str, "least", "least: tightest positive headroom wins (bin-packing); "
              "most: largest headroom wins (spreading)", choices=("least", "most")),
        Param("ttftWeight", float, 0.8, "Weight of TTFT headroom in the blend", lo=0.0),
        Param("tpotWeight", float, 0.2, "Weight of TPOT headroom in the blend", lo=0.0),
        Param("preferIdle", bool, True, "When no pod has positive headroom, score only idle "
              "pods if there are any"),
        Param("fallbackKvWeight", float, 1.0, "Composite fallback: weight of free KV cache",
              lo=0.0),
        Param("fallbackQueueWeight", float, 1.0, "Composite fallback: weight of the relative "
              "queue", lo=0.0),
        Param("fallbackPrefixWeight", float, 1.0, "Composite fallback: weight of the prefix "
              "score", lo=0.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.most = params["strategy"] == "most"
        a, b = params["ttftWeight"], params["tpotWeight"]
        if a + b <= 0:
            a, b = 1.0, 0.0
        self.a, self.b = a / (a + b), b / (a + b)
        self.prefer_idle: bool = params["preferIdle"]
        self.fb = (
            params["fallbackKvWeight"],
            params["fallbackQueueWeight"],
            params["fallbackPrefixWeight"],
        )

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        if not cycle.has_predictions:
            return composite_values(
                [p.kv_usage for p in pods],
                [p.waiting for p in pods],
                [p.prefix_score for p in pods],
                self.fb,
            )
        out = [0.0] * len(pods)
        pos = [i for i, p in enumerate(pods) if p.headroom_ttft_ms >= 0 and p.headroom_tpot_ms >= 0]
        if pos:
            nt = _norm([pods[i].headroom_ttft_ms for i in pos], 0.5)
            np_ = _norm([pods[i].headroom_tpot_ms for i in pos], 0.5)
            for k, i in enumerate(pos):
                c = self.a * nt[k] + self.b * np_[k]
                s = c if self.most else 1.0 - c
                out[i] = (2.0 + 99.0 * s) / 101.0
            cycle.notes[self.name] = "positive"
            return out
        cand = list(range(len(pods)))
        if self.prefer_idle:
            idle = [i for i in cand if pods[i].idle]
            if idle:
                cand = idle
        tpot_only = [i for i in cand if pods[i].headroom_ttft_ms >= 0]
        ttft_only = [i for i in cand if pods[i].headroom_tpot_ms >= 0]
        if tpot_only:
            bucket, label = tpot_only, "tpot_misses"
        elif ttft_only:
            bucket, label = ttft_only, "ttft_misses"
        else:
            bucket, label = cand, "both_miss"
        dt = _norm([max(0.0, -pods[i].headroom_ttft_ms) for i in bucket], 0.0)
        dp = _norm([max(0.0, -pods[i].headroom_tpot_ms) for i in bucket], 0.0)
        for k, i in enumerate(bucket):
            blended = self.a * dt[k] + self.b * dp[k]
            out[i] = (2.0 + 80.0 * (1.0 - blended)) / 101.0
        cycle.notes[self.name] = label
        return out
