"""Builders for the scheduling unit tests: candidates, rows, cycles."""

from __future__ import annotations

import random
from dataclasses import dataclass

from services.gateway.scheduling.cycle import CycleState, PodState, SchedulingRequest
from services.gateway.scheduling.plugins.producer import PredictedLatencyProducer
from services.gateway.scheduling.pod_view import Candidate
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.rows import CandidateRows
from shared.features import PodLoad, build_row


@dataclass
class P:
    """One test pod: load, prefix score, prediction (ttft, tpot) or None."""

    waiting: float = 0.0
    running: float = 1.0
    kv: float = 0.5
    prefix: float = 0.0
    in_flight: int = 1
    blocks: int = 0
    pred: tuple[float, float] | None = None
    tpot_slo: float | None = None  # tightest running TPOT SLO
    backlog: float = 0.0  # seconds of prefill queued (the pod view's cost-model estimate)
    service: float = 0.1  # this request's own prefill estimate there, seconds
    protected: int = 0  # decoding requests still within their SLO
    tpot_s: float | None = None  # measured recent TPOT there (the pod view's EWMA)
    context: float = 0.0  # prompt tokens in flight there (the pod view's context_tokens)
    decode_k: float = 0.0  # decode seconds per step per context token (learned)
    decode_free: float = 0.0  # the context where attention takes as long as the rest
    budget_share: float | None = 1.0  # measured share of max_tokens the answers used
    left: tuple[tuple[float, float], ...] = ()  # (context, decode steps left) per request


def rows_of(pods: list[P], input_tokens: int = 100) -> CandidateRows:
    cands = [
        Candidate(f"pod-{i}", f"http://pod-{i}", PodLoad(p.waiting, p.running, p.kv), False,
                  None, p.in_flight, p.tpot_slo, p.backlog, p.protected, p.tpot_s, p.context,
                  p.decode_k, p.decode_free, None, p.budget_share,
                  (lambda left=p.left: left))
        for i, p in enumerate(pods)
    ]  # fmt: skip
    scores = [p.prefix for p in pods]
    rows = [build_row(input_tokens, s, c.load) for c, s in zip(cands, scores, strict=True)]
    return CandidateRows(cands, scores, rows, [p.blocks for p in pods], [p.service for p in pods])


def predictions_of(pods: list[P]) -> list[Prediction] | None:
    if any(p.pred is None for p in pods):
        return None
    return [Prediction(*p.pred) for p in pods]  # type: ignore[misc]


def req(
    ttft: float | None = None,
    tpot: float | None = None,
    priority: int = 0,
    max_tokens: int = 100,
    queued_s: float = 0.0,
    input_tokens: int = 100,
) -> SchedulingRequest:
    return SchedulingRequest(
        "m", input_tokens, (), ttft, tpot, priority, max_tokens, queued_s=queued_s
    )


def cycle(
    pods: list[P],
    request: SchedulingRequest | None = None,
    seed: int = 0,
    streaming_mode: bool = True,
    buffer: float = 1.0,
) -> CycleState:
    """A cycle whose pod states carry the producer's attachments (when every pod has a
    prediction)."""
    cr = rows_of(pods)
    states = [
        PodState(i, c, cr.prefix_scores[i], pods[i].blocks, c.in_flight,
                 c.load.waiting + c.load.unseen_requests, c.load.running, c.load.kv_usage,
                 pods[i].service)
        for i, c in enumerate(cr.candidates)
    ]  # fmt: skip
    cyc = CycleState(request or req(), states, 0.0, random.Random(seed))
    prod = PredictedLatencyProducer.create(streamingMode=streaming_mode, sloBufferFactor=buffer)
    prod.produce(cyc, predictions_of(pods))
    return cyc


def names(states: list[PodState]) -> list[int]:
    return [s.index for s in states]
