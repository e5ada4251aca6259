"""inference-perf's load generator in virtual time, against one simulated pod.

What the load generator does (``inference_perf/loadgen/load_generator.py``), reproduced:

- A stage queues all its requests at once and starts 1 s later (``start_time =
  perf_counter() + 1``); its requests are due at the timer's times.
- ``num_workers`` worker processes each take requests from the queue under a semaphore of
  ``worker_max_concurrency``: a worker acquires a slot, takes the next request, sleeps until
  it is due and sends it; the slot is released when the response has been read. So at most
  ``num_workers x worker_max_concurrency`` requests are held at once (due later, or in
  flight), and when every slot is in flight a request is sent only when one finishes
  (its ``schedule_delay`` grows and the stage's ``achieved_rate`` falls below the requested
  rate). Modelled as one pool of that many slots taken in queue order.
- A stage is over when every request finished; the generator notices on its 1 s progress
  poll, then sleeps ``load.interval`` before the next stage.
- A request's ``start_time`` is when it is sent, ``scheduled_time`` when it was due,
  ``end_time`` when the stream ended (the ``[DONE]`` event, sent with the last token).

The engine is stepped by :class:`~services.simulator.virtual_pod.VirtualPod`; the
engine's ``api_overhead_s`` is the time from the client's send to the scheduler seeing the
request, as in the lab. Each streamed token is one server-sent event at the end of the step
that produced it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.simulator.engine import Engine
from services.simulator.inference_perf.config import BenchConfig, Stage
from services.simulator.inference_perf.datagen import DataGenerator
from services.simulator.inference_perf.load import (
    PROBE_DURATION_S,
    arrival_times,
    in_flight_samples,
    saturation_estimate,
    sweep_stages,
)
from services.simulator.profiles import Profile
from services.simulator.virtual_pod import VirtualPod

INF = math.inf
POLL_S = 1.0  # the load generator's progress poll


@dataclass(slots=True, eq=False)
class RequestRecord:
    """One request's lifecycle as the client saw it (times in virtual seconds)."""

    stage: int
    scheduled: float
    input_tokens: int
    max_tokens: int
    start: float = math.nan  # sent
    end: float = math.nan  # stream over ([DONE]) or error
    token_times: list[float] = field(default_factory=list)  # one streamed event per token
    output_tokens: int = 0
    error: str | None = None


@dataclass(frozen=True)
class StageResult:
    stage: int
    rate: float
    duration: float
    records: list[RequestRecord]


@dataclass(frozen=True)
class ProbeResult:
    rate: float
    estimate: float
    samples: list[tuple[float, int]]


@dataclass(frozen=True)
class BenchResult:
    stages: list[StageResult]
    probe: ProbeResult | None
    profile: Profile
    prefix_cache_queries: int
    prefix_cache_hits: int
    preemptions: int
    virtual_seconds: float


class _Run:
    def __init__(self, config: BenchConfig, profile: Profile, seed: int, token_scale: float):
        self.config = config
        self.pod = VirtualPod(Engine(profile, seed))
        self.data = DataGenerator(config, seed=seed, token_scale=token_scale)
        self.rng = np.random.default_rng(seed + 1)
        self.slots = config.load.concurrency
        self.clock = 0.0
        self._ids = 0

    def stage(
        self,
        stage_id: int,
        rate: float,
        duration: float,
        timeout: float | None = None,
        interval: float | None = None,
    ) -> tuple[list[RequestRecord], float]:
        """Run one stage from :attr:`clock`; returns its records and its start time. The
        clock then moves to the next stage's begin (next poll + ``interval``, by default
        ``load.interval``)."""
        engine, pod = self.pod.engine, self.pod
        t_begin = self.clock
        start = t_begin + 1.0
        due = arrival_times(self.config.load.type, rate, duration, start, self.rng)
        recs: list[RequestRecord] = []
        prompts = []
        for i, t in enumerate(due):
            p = self.data.prompt(i)
            prompts.append(p)
            recs.append(RequestRecord(stage_id, t, len(p.tokens), p.max_tokens))
        n = len(recs)
        sends: list[tuple[float, int]] = []
        free, nxt, done = self.slots, 0, 0
        open_: dict[str, RequestRecord] = {}
        deadline = start + timeout if timeout is not None else INF

        def dispatch(now: float) -> None:
            nonlocal free, nxt
            while free > 0 and nxt < n:
                free -= 1
                heapq.heappush(sends, (max(recs[nxt].scheduled, now), nxt))
                nxt += 1

        dispatch(t_begin)
        now = t_begin
        while done < n:
            ts = pod.step_end
            tq = sends[0][0] if sends else INF
            if ts == tq == INF:
                raise RuntimeError("stage stalled: requests left but nothing to do")
            if min(ts, tq) > deadline:  # the probe's timeout: what is left is cancelled
                for rid, rec in open_.items():
                    engine.abort(rid)
                    rec.error, rec.end = "cancelled", deadline
                now = deadline
                break
            if ts <= tq:
                now, out = pod.finish()
                finished = 0
                for ev in out.events:
                    rec = open_[ev.req_id]
                    rec.token_times.append(now)
                    if ev.finished:
                        rec.end, rec.output_tokens = now, ev.index + 1
                        del open_[ev.req_id]
                        finished += 1
                if finished:
                    done += finished
                    free += finished
                    dispatch(now)
            else:
                now, i = heapq.heappop(sends)
                rec, p = recs[i], prompts[i]
                rec.start = now
                rid = f"s{stage_id}-{self._ids}"
                self._ids += 1
                try:
                    engine.submit(rid, p.tokens, p.max_tokens, now)
                except ValueError as e:  # the server answers 400: prompt too long
                    rec.error, rec.end = str(e), now
                    done += 1
                    free += 1
                    dispatch(now)
                    continue
                open_[rid] = rec
                pod.kick(now)
        # the generator sees the stage done at its next 1 s poll, then waits load.interval
        polls = math.ceil(max(0.0, now - t_begin) / POLL_S)
        wait = self.config.load.interval if interval is None else interval
        self.clock = t_begin + polls * POLL_S + wait
        return recs, start


def run_benchmark(
    config: BenchConfig,
    profile: Profile,
    *,
    seed: int = 0,
    stage_rates: Sequence[float] | None = None,
    token_scale: float = 1.0,
    progress: Callable[[int, int, float], None] | None = None,
) -> BenchResult:
    """The whole benchmark: the sweep's probe (if any), then every stage. ``stage_rates``
    replaces the stages' rates (each keeps its configured or swept duration; with a sweep
    the probe still runs first, as the measured run did, but its estimate is not used)."""
    run = _Run(config, profile, seed, token_scale)
    load = config.load
    stages = list(load.stages)
    probe = None
    if load.sweep is not None:
        sw = load.sweep
        rate = sw.num_requests / PROBE_DURATION_S
        recs, start = run.stage(-1, rate, PROBE_DURATION_S, timeout=sw.timeout, interval=0.0)
        sent = [r for r in recs if not math.isnan(r.start)]
        samples = in_flight_samples(
            [r.start for r in sent], [r.end for r in sent], start - 1.0, run.clock
        )
        estimate = saturation_estimate(samples, sw.saturation_percentile, start - 1.0, sw.timeout)
        probe = ProbeResult(rate, estimate, samples)
        stages = sweep_stages(sw, estimate)
    if stage_rates is not None:
        rates = list(stage_rates)
        if load.sweep is not None:
            stages = [Stage(r, float(load.sweep.stage_duration)) for r in rates]
        elif len(rates) != len(stages):
            raise ValueError(f"{len(rates)} stage rates given for {len(stages)} stages")
        else:
            stages = [Stage(r, s.duration) for r, s in zip(rates, stages, strict=True)]
    results = []
    for i, s in enumerate(stages):
        if progress is not None:
            progress(i, len(stages), s.rate)
        recs, _ = run.stage(i, s.rate, s.duration)
        results.append(StageResult(i, s.rate, s.duration, recs))
    st = run.pod.engine.stats()
    return BenchResult(
        stages=results,
        probe=probe,
        profile=profile,
        prefix_cache_queries=st.prefix_cache_queries,
        prefix_cache_hits=st.prefix_cache_hits,
        preemptions=st.preemptions,
        virtual_seconds=run.clock,
    )
