"""latency-slo-admitter: shed sheddable requests that no pod can serve within their SLO."""

from __future__ import annotations

from services.gateway.scheduling.cycle import CycleState, SchedulingRequest
from services.gateway.scheduling.params import Param
from services.gateway.scheduling.plugin import Admitter

REASON_SLO_UNATTAINABLE = "slo_unattainable"


class LatencySloAdmitter(Admitter):
    """Reject only if priority < 0 AND an SLO header is set AND predictions exist AND no pod
    is predicted to meet every SLO that applies AND no pod is idle AND no pod is cold (KV use
    below ``coldKvThreshold``). Without predictions every request is admitted."""

    TYPE = "latency-slo-admitter"
    DOC = "Sheds priority < 0 requests with SLOs that no pod is predicted to meet (503)."
    PARAMS = (
        Param("coldKvThreshold", float, 0.02, "A pod with KV-cache use below this is cold "
              "and always admits", lo=0.0, hi=1.0),
    )  # fmt: skip

    def __init__(self, name, params) -> None:
        super().__init__(name, params)
        self.cold: float = params["coldKvThreshold"]

    def reads_predictions(self, request: SchedulingRequest) -> bool:
        return request.priority < 0 and request.has_slo

    def admit(self, cycle: CycleState) -> tuple[str, str] | None:
        req = cycle.request
        if req.priority >= 0 or not req.has_slo or not cycle.has_predictions:
            return None
        for p in cycle.pods:
            if p.meets_slo or p.idle or p.kv_usage < self.cold:
                return None
        slos = []
        if req.slo_ttft_ms is not None:
            slos.append(f"TTFT {req.slo_ttft_ms:g} ms")
        if req.slo_tpot_ms is not None:
            slos.append(f"TPOT {req.slo_tpot_ms:g} ms")
        best = min(cycle.pods, key=lambda p: p.latency_ms)
        msg = (
            f"request shed ({REASON_SLO_UNATTAINABLE}): priority {req.priority} and no pod is "
            f"predicted to meet {' / '.join(slos)} (best predicted TTFT {best.pred_ttft_ms:.0f} "
            f"ms, TPOT {best.pred_tpot_ms:.1f} ms); every pod is busy; retry later"
        )
        return REASON_SLO_UNATTAINABLE, msg
