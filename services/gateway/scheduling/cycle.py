"""What one scheduling cycle works on: the request, a working state per candidate pod, the
outcome.

Pure data: no I/O. ``PodState`` is created afresh for every :meth:`Scheduler.schedule` call
and mutated by the plugins of that cycle only (the producer attaches predictions and
headrooms, scorers accumulate into ``score``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.gateway.scheduling.pod_view import Candidate


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    """The request as the scheduler sees it. SLOs are ``None`` when no header gave them."""

    model: str
    input_tokens: int
    prefix_hashes: tuple[int, ...] | list[int] = ()
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0
    max_tokens: int = 256  # decode budget (the request's max_tokens or the gateway default)
    streaming: bool = True  # the client asked for a stream
    profile: str | None = None  # profile requested by header (the shell resolves it)
    queued_s: float = 0.0  # time the request already spent in the gateway's queue

    @property
    def has_slo(self) -> bool:
        return self.slo_ttft_ms is not None or self.slo_tpot_ms is not None


@dataclass(slots=True, eq=False)
class PodState:
    """One candidate pod during one cycle."""

    index: int  # position in the candidate list
    candidate: Candidate
    prefix_score: float
    cached_blocks: int  # prefix-index blocks held for this pod (SGLang's "tree size")
    in_flight: int  # requests this scheduler's shell has in flight on the pod
    waiting: float  # scraped waiting + dispatched-since-scrape (the row's queue length)
    running: float
    kv_usage: float
    service_s: float = 0.0  # estimated seconds to prefill this request's uncached part here
    # attached by the predicted-latency producer (None without predictions)
    pred_ttft_ms: float | None = None
    pred_tpot_ms: float | None = None
    latency_ms: float = 0.0  # the latency TTFT headroom is computed on (TTFT or E2E)
    headroom_ttft_ms: float = 0.0  # budget - latency (budget 0 when no TTFT SLO)
    headroom_tpot_ms: float = 0.0  # budget - TPOT (budget 0 when no TPOT constraint)
    tpot_limited: bool = False  # a TPOT budget applies (own SLO or a running request's)
    meets_slo: bool = False  # every SLO that applies is met (a missing SLO is no constraint)
    score: float = 0.0  # weighted sum of scorer outputs

    @property
    def name(self) -> str:
        return self.candidate.name

    @property
    def idle(self) -> bool:
        """Nothing in flight from us and nothing running or queued per the last scrape."""
        return self.in_flight == 0 and self.running <= 0 and self.waiting <= 0


@dataclass(slots=True, eq=False)
class CycleState:
    """Shared by the plugins of one cycle."""

    request: SchedulingRequest
    pods: list[PodState]  # every candidate, in candidate order
    now: float
    rng: random.Random
    has_predictions: bool = False
    notes: dict[str, object] = field(default_factory=dict)  # plugin -> what it did


@dataclass(slots=True)
class Decision:
    """The outcome of one :meth:`Scheduler.schedule` call. Indices refer to the candidates."""

    profile: str
    admitted: bool
    ranked: list[int]  # best first (the chosen pod, then retry order); empty when rejected
    scores: list[float | None]  # combined score per candidate (None: filtered out / unscored)
    path: str  # what ranked the pods: predicted | cost-model | heuristic | fallback
    fallback_reason: str | None = None  # why a predicting profile ran without predictions
    reject_reason: str | None = None  # e.g. slo_unattainable
    reject_message: str | None = None
    predicted_ttft_ms: float | None = None  # of the chosen pod
    predicted_tpot_ms: float | None = None
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def chosen(self) -> int | None:
        return self.ranked[0] if self.ranked else None
