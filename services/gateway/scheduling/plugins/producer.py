"""predicted-latency-producer: attach predicted TTFT/TPOT and SLO headroom to every pod.

The shell made one prediction call for all candidates before the cycle (deadline
``budgetMs``); this plugin only interprets the result, so the core stays synchronous and the
lab can feed it from an in-process model.

Per pod, with ``b = sloBufferFactor``:
- TTFT budget = request TTFT SLO x b (0 without the header),
- TPOT budget = min(request TPOT SLO, tightest TPOT SLO already running on the pod) x b
  (0 when neither exists); a pod with a running TPOT SLO is TPOT-limited even for a request
  without one, so a new request is not routed where it would break a running one's SLO,
- ``streamingMode: true``: the latency compared with the TTFT budget is predicted TTFT and
  TPOT headroom = TPOT budget - predicted TPOT,
- ``streamingMode: false``: the client waits for the whole reply, so the latency is the
  predicted end-to-end time TTFT + TPOT x (max_tokens - 1), compared with the TTFT SLO header
  as an end-to-end budget; TPOT is not used (headroom 0, never limited).
Headroom = budget - prediction, so without SLO headers it is -prediction and the lowest
predicted latency scores best. ``meets_slo`` treats a missing SLO as no constraint.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.gateway.scheduling.cycle import CycleState
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import Producer
from services.gateway.scheduling.prediction import Prediction


class PredictedLatencyProducer(Producer):
    TYPE = "predicted-latency-producer"
    DOC = "Attaches predicted TTFT/TPOT and SLO headroom to every candidate pod."
    RANKS_BY = None
    PARAMS = (
        Param("budgetMs", float, 400.0, "Deadline of the one prediction call per request "
              "(the gateway uses min(this, HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS))",
              lo=0.0, lo_open=True, hi=60_000.0),
        Param("sloBufferFactor", float, 1.0, "Multiplies the SLO budgets before computing "
              "headroom (< 1 leaves a safety margin)", lo=0.0, lo_open=True, hi=10.0),
        Param("streamingMode", bool, False, "true: predict TTFT and TPOT; false: predict "
              "end-to-end latency and compare it with the TTFT SLO"),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.budget_ms: float = params["budgetMs"]
        self.buffer: float = params["sloBufferFactor"]
        self.streaming: bool = params["streamingMode"]

    def produce(self, cycle: CycleState, predictions: Sequence[Prediction] | None) -> None:
        if predictions is None:
            return
        req = cycle.request
        b = self.buffer
        ttft_slo = req.slo_ttft_ms
        ttft_budget = ttft_slo * b if ttft_slo is not None else 0.0
        own_tpot = req.slo_tpot_ms
        decode_steps = max(0, req.max_tokens - 1)
        for st, p in zip(cycle.pods, predictions, strict=True):
            st.pred_ttft_ms = p.ttft_ms
            st.pred_tpot_ms = p.tpot_ms
            if self.streaming:
                st.latency_ms = p.ttft_ms
                running = st.candidate.tightest_tpot_slo_ms
                if own_tpot is not None and running is not None:
                    tpot_slo: float | None = min(own_tpot, running)
                else:
                    tpot_slo = own_tpot if own_tpot is not None else running
                st.tpot_limited = tpot_slo is not None
                st.headroom_tpot_ms = (tpot_slo * b if tpot_slo is not None else 0.0) - p.tpot_ms
            else:
                st.latency_ms = p.ttft_ms + p.tpot_ms * decode_steps
                st.tpot_limited = False
                st.headroom_tpot_ms = 0.0
            st.headroom_ttft_ms = ttft_budget - st.latency_ms
            st.meets_slo = (ttft_slo is None or st.headroom_ttft_ms >= 0) and (
                not st.tpot_limited or st.headroom_tpot_ms >= 0
            )
        cycle.has_predictions = True
