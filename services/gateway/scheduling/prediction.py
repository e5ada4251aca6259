"""One candidate pod's predicted latencies, as the predictors (or the lab's in-process model)
return them, in candidate order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prediction:
    ttft_ms: float
    tpot_ms: float
