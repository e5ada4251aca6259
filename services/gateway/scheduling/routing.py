"""The per-request routing steps around one scheduling cycle, shared by the gateway and the
routing lab (bench/lab), so both route a request exactly the same way.

1. :func:`prepare` — resolve the profile and priority, hash the prompt's prefix blocks,
   build the candidates' feature rows (:func:`build_candidate_rows`) and the
   :class:`SchedulingRequest`;
2. the shell obtains predictions for ``prepared.rows.rows`` when
   ``prepared.scheduler.reads_predictions(prepared.request)`` (the gateway over NATS, the
   lab in process), then re-reads the loads with :func:`refresh` (other requests were
   dispatched meanwhile);
3. :func:`decide` — run the profile (:meth:`Scheduler.schedule`);
4. :func:`on_dispatch` when the request is sent to a ranked pod: in-flight accounting with
   the pod's uncached prompt tokens, and the prefix index learns the pod holds the prompt's
   blocks from now on (as the Inference Extension's prefix plugin does in ``PreRequest``: a
   request for the same prefix routed while this one is on its way or prefilling sees where
   the prefix is going, instead of prefilling it again elsewhere); :func:`on_refused` when
   the pod failed or refused it before its first byte (those blocks are forgotten again).
   The pod view's ``on_first_token`` and ``on_finish`` close the request.

Pure: no I/O, no clock (``now`` and ``rng`` are passed in).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from services.gateway.scheduling.config import SchedulingConfig
from services.gateway.scheduling.cost_model import CostModel
from services.gateway.scheduling.cycle import Decision, SchedulingRequest
from services.gateway.scheduling.flow import Waiter
from services.gateway.scheduling.pod_view import Candidate, PodView
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import CandidateRows, build_candidate_rows
from services.gateway.scheduling.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """Everything one scheduling cycle needs, built before the prediction call."""

    scheduler: Scheduler
    request: SchedulingRequest
    rows: CandidateRows

    @property
    def profile(self) -> str:
        return self.scheduler.profile

    @property
    def hashes(self) -> Sequence[int]:
        return self.request.prefix_hashes


def prepare(
    config: SchedulingConfig,
    schedulers: Mapping[str, Scheduler],
    index: PrefixIndex,
    candidates: Sequence[Candidate],
    tokens: Sequence[int],
    *,
    model: str,
    profile: str,
    max_tokens: int,
    streaming: bool,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    priority: int | None = None,
    cost: CostModel | None = None,
    hashes: Sequence[int] | None = None,
    queued_s: float = 0.0,
    gateway_queued: int = 0,
) -> PreparedRequest:
    """Build the cycle's inputs for a prompt of ``tokens`` over ``candidates`` (non-empty).

    ``priority`` None takes the model objective's priority from ``config``; the prefix
    blocks are hashed here (unless ``hashes`` already are) and reused by :func:`on_dispatch`;
    ``cost`` (the pod view's cost model) adds each pod's estimated prefill seconds;
    ``queued_s`` is the time the request already waited in the gateway's queue and
    ``gateway_queued`` how many requests wait there now (a feature column)."""
    sched = schedulers[profile]
    if priority is None:
        priority = config.objective(model).priority
    if hashes is None:
        hashes = index.hashes(tokens)
    n = len(tokens)
    rows = build_candidate_rows(
        candidates, n, hashes, index, cost, max_tokens=max_tokens, gateway_queued=gateway_queued
    )
    request = SchedulingRequest(
        model=model, input_tokens=n, prefix_hashes=hashes, slo_ttft_ms=slo_ttft_ms,
        slo_tpot_ms=slo_tpot_ms, priority=priority, max_tokens=max_tokens,
        streaming=streaming, profile=profile, queued_s=queued_s,
    )  # fmt: skip
    return PreparedRequest(sched, request, rows)


def best_service_s(
    cost: CostModel,
    index: PrefixIndex,
    candidates: Sequence[Candidate],
    tokens: Sequence[int],
    hashes: Sequence[int],
) -> float:
    """The request's shortest estimated prefill over the candidates (its prefix hits
    included): the key of the flow-control queue's shortest-first order."""
    n = len(tokens)
    scores = index.scores((c.name for c in candidates), hashes)
    return min(
        (
            cost.for_class(c.hardware_class).estimate((1.0 - s) * n, s * n)
            for c, s in zip(candidates, scores, strict=True)
        ),
        default=0.0,
    )


def waiter(
    config: SchedulingConfig,
    cost: CostModel,
    index: PrefixIndex,
    candidates: Sequence[Candidate],
    tokens: Sequence[int],
    hashes: Sequence[int],
    *,
    model: str,
    now: float,
    priority: int | None = None,
    slo_ttft_ms: float | None = None,
    payload: object = None,
) -> Waiter:
    """The flow-control queue's entry for a request (``priority`` None: the model
    objective's), keyed by its shortest estimated prefill over the candidates."""
    if priority is None:
        priority = config.objective(model).priority
    service = best_service_s(cost, index, candidates, tokens, hashes)
    return Waiter(model, priority, service, now, slo_ttft_ms, payload=payload)


def refresh(prepared: PreparedRequest, candidates: Sequence[Candidate]) -> PreparedRequest:
    """The same request with its candidates' loads read again (``candidates``: the view's
    candidates now; matched by pod name, pods no longer listed keep their old state).

    Call it after the prediction call, just before :func:`decide`: requests of the same
    burst were dispatched while the predictions were computed, and scorers that read the
    pods' loads (backlog, decodes, queue) would otherwise all see the loads from before the
    call and send the whole burst to the same pod (measured in the routing lab: a 2 ms call
    on bursty chat traffic raised headroom's TTFT p50 by half; docs/scheduling.md). The
    feature rows, prefix scores and service estimates stay: the predictions were made on
    them."""
    now = {c.name: c for c in candidates}
    rows = prepared.rows
    fresh = [now.get(c.name, c) for c in rows.candidates]
    return PreparedRequest(prepared.scheduler, prepared.request, replace(rows, candidates=fresh))


def decide(
    prepared: PreparedRequest,
    predictions: Sequence[Prediction] | None,
    *,
    now: float,
    rng: random.Random,
    fallback_reason: str | None = None,
) -> Decision:
    """One scheduling cycle (see :meth:`Scheduler.schedule`)."""
    return prepared.scheduler.schedule(
        prepared.request,
        prepared.rows,
        predictions,
        now=now,
        rng=rng,
        fallback_reason=fallback_reason,
    )


def on_dispatch(
    view: PodView,
    index: PrefixIndex,
    request_id: str,
    prepared: PreparedRequest,
    i: int,
    now: float,
) -> list[int]:
    """The request is being sent to candidate ``i``: count it in flight there, and record
    that the pod holds the prompt's prefix blocks from now on. Returns the blocks newly
    recorded (for :func:`on_refused`)."""
    req = prepared.request
    pod = prepared.rows.candidates[i].name
    uncached = prepared.rows.uncached_tokens(i, req.input_tokens)
    view.on_dispatch(
        request_id,
        pod,
        uncached,
        req.max_tokens,
        now,
        req.slo_tpot_ms,
        cached_tokens=req.input_tokens - uncached,
        ttft_slo_ms=req.slo_ttft_ms,
    )
    return index.insert(pod, req.prefix_hashes)


def on_refused(
    view: PodView,
    index: PrefixIndex,
    request_id: str,
    prepared: PreparedRequest,
    i: int,
    added: Sequence[int],
) -> None:
    """Candidate ``i`` failed or refused the request before its first byte: it is no longer
    in flight there, and the blocks :func:`on_dispatch` newly recorded (``added``) are not
    held there after all."""
    view.on_finish(request_id)
    index.forget(prepared.rows.candidates[i].name, added)
