"""latency-cost-scorer: the pod where this request costs everyone the least time.

Sending a prompt to a pod costs its own time to first token there (the prefill already
queued on the pod plus its own uncached part) and, because a prefill shares the pod's steps
with every request decoding there, it slows each of those decodes by about its own prefill
time. Per candidate pod ``i``:

    own_i    = backlog_i + service_i          (seconds; the pod view's cost model)
               or the predicted TTFT, with latency: predicted and predictions present
    cost_i   = own_i + damageWeight x protected_i x service_i

``protected_i`` counts the requests decoding on the pod that are still worth protecting
(they met their TTFT SLO, or had none). A request with a TTFT SLO that no pod can meet any
more (``min own + time already queued > SLO``) is *hopeless*: its own SLO is lost wherever
it goes, so with ``sacrificeHopeless`` it goes where it harms the fewest protected decodes:

    cost_i   = protected_i x service_i + hopelessLatencyWeight x own_i

Scores are ``(max cost - cost) / (max cost - min cost)`` (1 for the cheapest, all 1 when
equal). The picture behind it: one long prefill (a 100k-token prompt takes ~15 s on an H100
and every step of it is ~1 s of attention) ruins TPOT for every request decoding beside it,
so long or hopeless prompts are steered to pods where little would be ruined.
"""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, PodState, SchedulingRequest
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import RANKED_COST_MODEL, Scorer

_EPS = 1e-12


class LatencyCostScorer(Scorer):
    TYPE = "latency-cost-scorer"
    DOC = "Scores pods by own TTFT plus the prefill delay inflicted on requests decoding there."
    RANKS_BY = RANKED_COST_MODEL
    PARAMS = (
        Param("damageWeight", float, 0.05, "Weight of the delay inflicted on each protected "
              "decoding request (seconds of its time per second of own TTFT)", lo=0.0,
              hi=100.0),
        Param("latency", str, "estimated", "Own TTFT: estimated (backlog + service from the "
              "cost model) or predicted (the producer's predicted TTFT, when present)",
              choices=("estimated", "predicted")),
        Param("sacrificeHopeless", bool, True, "A request that can no longer meet its TTFT SLO "
              "goes where it harms the fewest protected decodes"),
        Param("hopelessLatencyWeight", float, 0.01, "Weight of a hopeless request's own TTFT "
              "against the harm it does (higher spreads hopeless requests, bounding their "
              "latency)", lo=0.0, hi=100.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.w: float = params["damageWeight"]
        self.predicted: bool = params["latency"] == "predicted"
        self.sacrifice: bool = params["sacrificeHopeless"]
        self.hopeless_own: float = params["hopelessLatencyWeight"]

    def reads_predictions(self, request: SchedulingRequest) -> bool:
        return self.predicted

    def own_seconds(self, cycle: CycleState, p: PodState) -> float:
        if self.predicted and cycle.has_predictions and p.pred_ttft_ms is not None:
            return p.pred_ttft_ms / 1000.0
        return p.candidate.backlog_s + p.service_s

    def score(self, cycle: CycleState, pods: list[PodState]) -> list[float]:
        if not pods:
            return []
        own = [self.own_seconds(cycle, p) for p in pods]
        req = cycle.request
        slo = req.slo_ttft_ms
        hopeless = self.sacrifice and slo is not None and min(own) + req.queued_s > slo / 1000.0
        if hopeless:
            costs = [
                p.candidate.protected_decodes * p.service_s + self.hopeless_own * o
                for p, o in zip(pods, own, strict=True)
            ]
        else:
            costs = [
                o + self.w * p.candidate.protected_decodes * p.service_s
                for p, o in zip(pods, own, strict=True)
            ]
        cycle.notes[self.name] = "hopeless" if hopeless else "normal"
        lo, hi = min(costs), max(costs)
        if hi - lo <= _EPS:
            return [1.0] * len(pods)
        return [(hi - c) / (hi - lo) for c in costs]
