"""The lab's discrete-event loop: a trace replayed against simulated pods in virtual time.

Every piece is the production code, driven by a virtual clock:
- pods: ``services.simulator.engine.Engine`` (pod ``i`` seeded ``seed + i`` like the
  simulator service), stepped like the pod server's driver by
  ``services.simulator.virtual_pod.VirtualPod``: while an engine has work, a step starts
  when the previous one ends; an idle engine starts stepping when a request arrives;
- the collector: every ``scrape_interval_s`` each pod's stats become a ``PodRecord``
  (``services.simulator.pod_record``) and one ``PodSnapshot`` is applied to the pod view;
- the gateway: ``services.gateway.scheduling.routing`` (prepare -> predictions -> decide ->
  dispatch accounting), the same ``PodView`` / ``PrefixIndex`` / scheduler, with the
  gateway's settings; first-token and finish events update the view as the proxy does. A
  request is routed ``ingress_s + ingress_s_per_token x prompt tokens`` after it was sent
  (HTTP, JSON and the gateway's tokenizer) and reaches its pod's engine
  ``pod_ingress_s + pod_ingress_s_per_token x prompt tokens`` after the dispatch (HTTP and the
  pod's tokenizer: a scrape meanwhile does not show it, as live); latencies count from when
  it was sent. With a predicting profile the decision comes ``predict_latency_s`` after the
  rows were built, as in the gateway, where requests arriving during the prediction call see
  the same loads;
- trainer and predictor: :class:`bench.lab.learning.OnlineLearner`;
- the lab-only reference policies (:mod:`bench.lab.oracle`): for ``oracle-ttft`` and
  ``oracle-ttft-blind`` the cycle of their base profile runs, then the greedy TTFT oracle
  ranks the candidates by forking them; ``oracle-predicted`` runs headroom-learned's cycle
  with the forks' TTFTs as its predictions. With ``shadow_oracle`` every decision also gets
  the noise-blind oracle's TTFT per candidate (``_Pending.shadow_ms``), never used to route;
- the non-greedy reference ``oracle-rollout`` (:mod:`bench.lab.rollout`): headroom's cycle,
  then every candidate played on a copy of the whole simulation (:meth:`LabSimulation.fork`,
  resumed by :meth:`LabSimulation.advance`).

At equal times, step ends are handled first, then scrapes, model installs and refit checks,
then arrivals. Deterministic for a given seed.
"""

from __future__ import annotations

import copy
import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from bench.lab.learning import OnlineLearner
from bench.lab.oracle import ORACLE_PATH, InFlight, TtftOracle, oracle_for, routing_profile
from bench.lab.regret import RegretProbe
from bench.lab.report import FAILED, OK, REJECTED, RequestRecord
from bench.lab.rollout import DEFAULT_HORIZON_S, rollout_for
from bench.traces import TraceRequest
from services.gateway.predictor_client import REASON_NO_MODEL
from services.gateway.scheduling import routing
from services.gateway.scheduling.config import SchedulingConfig
from services.gateway.scheduling.cycle import Decision
from services.gateway.scheduling.flow import FlowQueue, QueueFull, Waiter
from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.settings import GatewaySettings
from services.simulator.engine import Engine
from services.simulator.pod_record import pod_record
from services.simulator.profiles import Profile
from services.simulator.virtual_pod import VirtualPod
from shared.schemas import PodSnapshot, TrainingSample

INF = float("inf")
POOL = "default"


@dataclass(slots=True, eq=False)
class SimPod:
    index: int
    name: str
    url: str
    driver: VirtualPod

    @property
    def engine(self) -> Engine:
        return self.driver.engine


@dataclass(slots=True)
class _Open:
    record: RequestRecord
    row: list[float]


@dataclass(slots=True, eq=False)
class _Pending:
    """A request between its rows and its decision (the prediction call)."""

    request: TraceRequest
    record: RequestRecord
    tokens: list[int]
    prep: routing.PreparedRequest
    rid: str
    preds: list[Prediction] | None = None
    reason: str | None = None
    version: str | None = None
    pod: SimPod | None = None  # chosen pod
    chosen: int | None = None  # its candidate index
    waiter: Waiter | None = None  # its place in the flow-control queue, if any
    added: list[int] = field(default_factory=list)  # prefix blocks its dispatch newly recorded
    # with shadow_oracle: per candidate, the noise-blind oracle's TTFT from the decision (ms)
    shadow_ms: list[float | None] | None = None


class LabSimulation:
    def __init__(
        self,
        requests: list[TraceRequest],
        *,
        profile: Profile | Sequence[Profile],
        pods: int,
        seed: int,
        scheduling: SchedulingConfig,
        policy: str,
        gateway: GatewaySettings,
        model: str,
        streaming: bool = False,
        slo_ttft_ms: float | None = None,
        slo_tpot_ms: float | None = None,
        priority: int | None = None,
        scrape_interval_s: float = 0.1,
        ingress_s_per_token: float = 0.0,
        ingress_s: float = 0.0,
        pod_ingress_s_per_token: float = 0.0,
        pod_ingress_s: float = 0.0,
        predict_latency_s: float = 0.0,
        client_max_tokens: int | None = None,
        learner: OnlineLearner | None = None,
        on_submit: Callable[[str, Engine, list[float], float], None] | None = None,
        on_decision: Callable[[_Pending, Decision, float], None] | None = None,
        regret: RegretProbe | None = None,
        shadow_oracle: bool = False,
        rollout_horizon_s: float = DEFAULT_HORIZON_S,
        rollout_objective: str = "sum",
    ) -> None:
        self.requests = requests
        # one profile for every pod, or one per pod (a mixed pool)
        self.pod_profiles = [profile] * pods if isinstance(profile, Profile) else list(profile)
        if len(self.pod_profiles) != pods:
            raise ValueError(f"{len(self.pod_profiles)} profiles for {pods} pods")
        self.profile = self.pod_profiles[0]
        self.pods = [
            SimPod(i, f"pod-{i}", f"sim://pod-{i}", VirtualPod(Engine(prof, seed + i)))
            for i, prof in enumerate(self.pod_profiles)
        ]
        self._pod_by_name = {p.name: p for p in self.pods}
        self.scheduling = scheduling
        self.policy = policy
        # the profile whose cycle runs (a lab-only reference policy runs a shipped one's:
        # bench/lab/oracle.py); the greedy TTFT oracle then replaces its ranking
        self.route_profile = routing_profile(policy)
        self.schedulers = {self.route_profile: scheduling.scheduler(self.route_profile)}
        self.oracle = oracle_for(policy)
        # the non-greedy reference (bench/lab/rollout.py): forks the whole simulation per
        # decision; releases from the flow-control queue go through the event queue, so
        # every decision happens at the top of an event and a copy resumes cleanly
        self.rollout = rollout_for(policy, rollout_horizon_s, rollout_objective)
        self.defer_releases = self.rollout is not None
        if self.rollout is not None and (slo_ttft_ms is not None or slo_tpot_ms is not None):
            raise ValueError(f"{policy} runs without SLO headers (its copies carry no learner)")
        # diagnostics: the noise-blind oracle's TTFT of every candidate, beside any policy's
        # decision (never used to route; _Pending.shadow_ms; `headroom lab decisions --oracle`)
        self.shadow = TtftOracle(foresight=False, ranks=False) if shadow_oracle else None
        self.view = PodView.from_settings(gateway)
        self.index = PrefixIndex(
            gateway.prefix_block_tokens,
            gateway.prefix_index_blocks,
            gateway.prefix_index_auto_capacity,
        )
        self.rng = random.Random(seed)
        self.model = model
        self.streaming = streaming
        self.slo_ttft_ms = slo_ttft_ms
        self.slo_tpot_ms = slo_tpot_ms
        self.priority = priority
        self.scrape_interval_s = scrape_interval_s
        self.ingress_s_per_token = ingress_s_per_token
        self.ingress_s = ingress_s
        self.pod_ingress_s_per_token = pod_ingress_s_per_token
        self.pod_ingress_s = pod_ingress_s
        self.predict_latency_s = predict_latency_s
        # what clients send as max_tokens (None: each request's own output length)
        self.client_max_tokens = client_max_tokens
        if client_max_tokens is not None:
            longest = max((r.output_tokens for r in requests), default=0)
            if longest > client_max_tokens:
                raise ValueError(
                    f"client max_tokens {client_max_tokens} is below a request's output "
                    f"({longest} tokens): the engines would stop early and the workload change"
                )
        # requests awaiting their prediction call or on their way to the pod: (time, seq,
        # handler, pending request)
        self._events: list[tuple[float, int, Callable[[_Pending, float], None], _Pending]] = []
        self.learner = learner
        # called with (request id, its pod's engine, its feature row, now) just before a
        # request reaches its engine (bench/bench_prediction_bound.py observes the truth)
        self.on_submit = on_submit
        # called with (the pending request, its decision, now) after every scheduling cycle
        # (bench/lab/diagnose.py logs the decisions)
        self.on_decision = on_decision
        self.regret = regret  # forks the candidates of sampled decisions (bench/lab/regret.py)
        self.records = [
            RequestRecord(r.index, r.arrival_s, r.input_tokens, r.output_tokens) for r in requests
        ]
        self._open: dict[str, _Open] = {}
        self._heap: list[tuple[float, int, int]] = []  # (step end, seq, pod index)
        self._seq = 0
        self.scrapes = 0
        self.sacrificed = 0  # decisions the scorer made for requests past their TTFT SLO
        # flow control, as the gateway runs it for a profile that enables it
        flow = scheduling.flow(self.route_profile)
        self.flow = FlowQueue(flow) if flow.enabled else None
        self._now = 0.0  # the virtual time of the event being handled (for the view's hook)
        if self.flow is not None:
            self.view.on_change = self._pump

    # --- the run ------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> list[RequestRecord]:
        self.start()
        self.advance(progress=progress)
        if self.regret is not None:
            self.regret.finish()
        return self.records

    def start(self) -> None:
        """Set the run's clock at its start (:meth:`advance` plays it)."""
        reqs = self.requests
        n = len(reqs)
        k = self.ingress_s_per_token
        # a request is routed and reaches its pod once the prompt is through the ingress
        # (HTTP, the gateway's and the pod's tokenizers): small prompts overtake big ones
        # sent at the same moment, as in the live stack
        self._at = [r.arrival_s + self.ingress_s + k * r.input_tokens for r in reqs]
        self._order = sorted(range(n), key=lambda j: (self._at[j], j)) if k > 0 else range(n)
        self._ai = 0  # arrivals handled
        self._k_scrape = 0
        self._next_scrape = 0.0
        self._k_train = 1
        self._next_train = self.learner.interval_s if self.learner else INF

    def advance(
        self,
        stop: Callable[[], bool] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Handle the run's events in order until none is left or ``stop()`` (asked before
        each event) is true. The loop's position lives on the simulation, so a copy taken
        inside a handler (bench/lab/rollout.py) resumes after that event."""
        reqs, records, at, order = self.requests, self.records, self._at, self._order
        n = len(reqs)
        pending = self._events
        heap = self._heap
        learner = self.learner
        interval = learner.interval_s if learner else INF
        report_every = max(1, n // 200)
        while self._ai < n or self._open or pending:
            if stop is not None and stop():
                return
            ai = self._ai
            th = heap[0][0] if heap else INF
            ta = at[order[ai]] if ai < n else INF
            ti = learner.next_install() if learner else None
            next_scrape = self._next_scrape
            next_train = self._next_train if learner else INF  # a copy has no learner
            tc = min(next_scrape, next_train, INF if ti is None else ti)
            td = pending[0][0] if pending else INF
            if th <= ta and th <= tc and th <= td:
                _, _, pi = heapq.heappop(heap)
                self._step_end(self.pods[pi])
            elif td <= ta and td <= tc:
                t, _, handler, p = heapq.heappop(pending)
                self._now = t
                handler(p, t)
            elif tc <= ta:
                self._now = tc
                if next_scrape <= tc:
                    self._k_scrape += 1
                    self._next_scrape = self._k_scrape * self.scrape_interval_s
                    self._scrape(next_scrape)
                elif ti is not None and ti <= tc:
                    learner.install_due(ti)  # type: ignore[union-attr]
                else:
                    self._k_train += 1
                    self._next_train = self._k_train * interval
                    learner.tick(next_train)  # type: ignore[union-attr]
            else:
                j = order[ai]
                self._now = ta
                self._ai = ai + 1
                self._arrive(reqs[j], records[j], ta)
                if progress is not None and ((ai + 1) % report_every == 0 or ai + 1 == n):
                    progress(ai + 1)

    # --- the collector ------------------------------------------------------------------
    def _scrape(self, now: float) -> None:
        profs, model = self.pod_profiles, self.model
        recs = []
        for p in self.pods:
            stats = p.engine.stats()
            rec = pod_record(stats, profs[p.index], name=p.name, url=p.url, model=model,
                             scraped_at=now)  # fmt: skip
            recs.append(rec)
        self.view.apply_snapshot(PodSnapshot(pool=POOL, ts=now, pods=recs))
        self.index.sync(recs)
        self.scrapes += 1

    # --- the pods -----------------------------------------------------------------------
    def _schedule_step(self, pod: SimPod) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (pod.driver.step_end, self._seq, pod.index))

    def _step_end(self, pod: SimPod) -> None:
        t, out = pod.driver.finish()
        self._now = t
        for ev in out.events:
            if ev.index and not ev.finished:
                continue
            op = self._open[ev.req_id]
            rec = op.record
            if ev.index == 0:
                rec.first_token_s = t
                self.view.on_first_token(ev.req_id, t)
            if ev.finished:
                rec.finished_s = t
                rec.output_tokens = ev.index + 1
                rec.status = OK
                self.view.on_finish(ev.req_id, t, rec.output_tokens)
                del self._open[ev.req_id]
                if self.learner is not None:
                    self._sample(ev.req_id, op, t)
        if pod.driver.busy:
            self._schedule_step(pod)

    def _sample(self, rid: str, op: _Open, now: float) -> None:
        rec = op.record
        e2e = rec.pod_e2e_ms  # measured from the dispatch, as the gateway's proxy does
        sample = TrainingSample(
            request_id=rid, pool=POOL, pod=rec.pod or "", model=self.model,
            features=op.row, e2e_ms=e2e if e2e is not None else 0.0,
            input_tokens=rec.input_tokens, output_tokens=rec.output_tokens,
            streaming=self.streaming, ts=now, ttft_ms=rec.pod_ttft_ms, tpot_ms=rec.tpot_ms,
            routing=rec.path or "fallback", model_version=rec.model_version,
            predicted_ttft_ms=rec.predicted_ttft_ms, predicted_tpot_ms=rec.predicted_tpot_ms,
        )  # fmt: skip
        self.learner.offer(sample, now)  # type: ignore[union-attr]
        twin = self.learner.twin  # type: ignore[union-attr]
        if twin is not None:  # the same sample, with the twin's own predictions
            twin.offer(replace(sample, model_version=None, predicted_ttft_ms=rec.twin_ttft_ms,
                               predicted_tpot_ms=rec.twin_tpot_ms), now)  # fmt: skip

    # --- the gateway --------------------------------------------------------------------
    def _arrive(self, req: TraceRequest, rec: RequestRecord, now: float) -> None:
        """The gateway has the request: with flow control it may wait in the queue first;
        then :meth:`_route`."""
        cands = self.view.candidates(self.model, now)
        if not cands:  # cannot happen with the lab's always-ready pods; kept for safety
            rec.status, rec.error = FAILED, "no_ready_pod"
            return
        tokens = req.prompt_tokens()
        if self.flow is None:
            self._route(req, rec, tokens, cands, now)
            return
        hashes = self.index.hashes(tokens)
        w = routing.waiter(
            self.scheduling, self.view.cost, self.index, cands, tokens, hashes,
            model=self.model, now=now, priority=self.priority, slo_ttft_ms=self.slo_ttft_ms,
            payload=(req, rec, tokens, hashes),
        )  # fmt: skip
        try:
            released = self.flow.offer(w, cands, now)
        except QueueFull:
            rec.status, rec.error = REJECTED, "queue_full"
            return
        if released:
            self._release(w, now)

    def _pump(self) -> None:
        """The view's change hook: release what the flow-control queue lets go now."""
        assert self.flow is not None
        if not self.flow.queued:
            return
        now = self._now
        for w in self.flow.take(lambda m: self.view.candidates(m, now), now):
            if self.defer_releases:
                self._seq += 1
                heapq.heappush(self._events, (now, self._seq, self._release, w))
            else:
                self._release(w, now)

    def _release(self, w: Waiter, now: float) -> None:
        req, rec, tokens, hashes = w.payload  # type: ignore[misc]
        assert self.flow is not None
        cands = self.flow.route_among(w, self.view.candidates(self.model, now))
        self._route(req, rec, tokens, cands, now, hashes=hashes, waiter=w)

    def _route(
        self,
        req: TraceRequest,
        rec: RequestRecord,
        tokens: list[int],
        cands: list,
        now: float,
        *,
        hashes: list[int] | None = None,
        waiter: Waiter | None = None,
    ) -> None:
        """Build the rows from the view as it is now; with a predicting profile the decision
        waits for the prediction call (``predict_latency_s``), and requests arriving
        meanwhile see the same loads."""
        prep = routing.prepare(
            self.scheduling, self.schedulers, self.index, cands, tokens,
            model=self.model, profile=self.route_profile,
            max_tokens=req.output_tokens if self.client_max_tokens is None
            else self.client_max_tokens,
            streaming=self.streaming, slo_ttft_ms=self.slo_ttft_ms,
            slo_tpot_ms=self.slo_tpot_ms, priority=self.priority, cost=self.view.cost,
            hashes=hashes, queued_s=waiter.queued_s() if waiter is not None else 0.0,
            gateway_queued=self.flow.queued if self.flow is not None else 0,
        )  # fmt: skip
        p = _Pending(req, rec, tokens, prep, f"r{req.index}", waiter=waiter)
        learner = self.learner
        if learner is not None and prep.scheduler.reads_predictions(prep.request):
            served = learner.predict(prep.rows.rows)
            if served is None:
                p.reason = REASON_NO_MODEL
            else:
                p.preds = [
                    Prediction(a, b) for a, b in zip(served.ttft_ms, served.tpot_ms, strict=True)
                ]
                p.version = served.version
            if self.predict_latency_s > 0:
                self._later(now + self.predict_latency_s, self._decide, p)
                return
        self._decide(p, now)

    def _decide(self, p: _Pending, now: float) -> None:
        if self.predict_latency_s > 0 and p.prep.scheduler.reads_predictions(p.prep.request):
            # after the prediction call: the loads as they are now (routing.refresh)
            p.prep = routing.refresh(p.prep, self.view.candidates(self.model, now))
        oracle = self.oracle
        if (
            oracle is not None
            and not oracle.ranks
            and p.prep.scheduler.reads_predictions(p.prep.request)
        ):
            self._oracle_predictions(p, now)
        prep, preds = p.prep, p.preds
        decision = routing.decide(prep, preds, now=now, rng=self.rng, fallback_reason=p.reason)
        if oracle is not None and oracle.ranks and decision.admitted:
            decision = self._oracle_decision(p, decision, now)
        if self.shadow is not None and decision.admitted:
            p.shadow_ms = self._oracle_ms(p, now, self.shadow)
        if self.rollout is not None and decision.admitted:
            decision = self.rollout.choose(self, p, decision, now)
        self._dispatch(p, decision, now)

    def _dispatch(self, p: _Pending, decision: Decision, now: float) -> None:
        """Act on ``decision`` for ``p``: reject it, or account the dispatch to its first
        pod and send it on its way."""
        prep, rec, req, preds = p.prep, p.record, p.request, p.preds
        rec.path = decision.path
        if self.on_decision is not None:
            self.on_decision(p, decision, now)
        if "hopeless" in decision.notes.values():
            self.sacrificed += 1  # latency-cost-scorer placed it as a lost cause
        if not decision.admitted:
            rec.status, rec.error = REJECTED, decision.reject_reason
            if p.waiter is not None:
                self.flow.routed(p.waiter)  # type: ignore[union-attr]
            return
        i = decision.ranked[0]
        p.pod = self._pod_by_name[prep.rows.candidates[i].name]
        p.chosen = i
        rec.pod = p.pod.name
        rec.dispatched_s = now
        p.added = routing.on_dispatch(self.view, self.index, p.rid, prep, i, now)
        if p.waiter is not None:
            self.flow.routed(p.waiter)  # type: ignore[union-attr]
        if preds is not None:
            rec.model_version = p.version
            rec.predicted_ttft_ms = decision.predicted_ttft_ms
            rec.predicted_tpot_ms = decision.predicted_tpot_ms
        delay = self._pod_delay(req)
        if delay > 0:
            self._later(now + delay, self._submit, p)
        else:
            self._submit(p, now)

    def fork(self, p: _Pending, *, noise: bool = True) -> tuple[LabSimulation, _Pending]:
        """A copy of the whole run at this instant and its copy of ``p`` (being decided):
        engines forked (:meth:`VirtualPod.fork`, ``noise``), everything else deep-copied
        (the pod view, prefix index, flow queue, events, records, the loop's position), the
        trace shared. The copy has no learner, regret probe, shadow oracle, hooks or
        rollout of its own: it routes with the base profile (bench/lab/rollout.py)."""
        memo: dict[int, object] = {id(self.requests): self.requests}
        for shared in (self._at, self._order, self.scheduling, self.pod_profiles):
            memo[id(shared)] = shared
        for dropped in (self.learner, self.regret, self.shadow, self.on_submit,
                        self.on_decision, self.rollout):  # fmt: skip
            if dropped is not None:
                memo[id(dropped)] = None
        for pod in self.pods:
            memo[id(pod.driver)] = pod.driver.fork(noise=noise)
        return copy.deepcopy((self, p), memo)

    def _pod_delay(self, req: TraceRequest) -> float:
        """From the dispatch to the pod's engine (HTTP and the pod's tokenizer)."""
        return self.pod_ingress_s + self.pod_ingress_s_per_token * req.input_tokens

    def _oracle_ttfts(
        self, p: _Pending, now: float, oracle: TtftOracle | None = None
    ) -> list[float | None]:
        """The TTFT (from reaching the engine) of ``p`` on every candidate by ``oracle``
        (the policy's by default): each forked at the moment the request would reach its
        engine, with the requests already on their way there (bench/lab/oracle.py)."""
        oracle = oracle or self.oracle
        assert oracle is not None
        req = p.request
        pods = [self._pod_by_name[c.name] for c in p.prep.rows.candidates]
        flying: dict[int, list[InFlight]] = {}
        for t, _, handler, q in sorted(self._events, key=lambda e: (e[0], e[1])):
            if handler == self._submit and q.pod is not None:
                flying.setdefault(q.pod.index, []).append(
                    InFlight(t, q.rid, q.tokens, q.request.output_tokens)
                )
        return oracle.ttfts(
            [q.driver for q in pods], p.rid, p.tokens, req.output_tokens,
            now + self._pod_delay(req), [flying.get(q.index, ()) for q in pods],
        )  # fmt: skip

    def _oracle_ms(
        self, p: _Pending, now: float, oracle: TtftOracle | None = None
    ) -> list[float | None]:
        """:meth:`_oracle_ttfts` in ms from the decision (the pod ingress added), as a
        router would predict them."""
        delay = self._pod_delay(p.request)
        return [
            None if t is None else 1000.0 * (t + delay) for t in self._oracle_ttfts(p, now, oracle)
        ]

    def _oracle_predictions(self, p: _Pending, now: float) -> None:
        """``oracle-predicted``: the noise-blind oracle's TTFTs (:meth:`_oracle_ms`) are the
        request's predictions; TPOT the learner's when it served some, else the pod's
        measured TPOT (0 before one). A pod whose engine refuses the prompt keeps the
        learner's prediction, or gets an hour."""
        served = p.preds
        cands = p.prep.rows.candidates
        preds = []
        for i, ms in enumerate(self._oracle_ms(p, now)):
            tpot = served[i].tpot_ms if served else 1000.0 * (cands[i].tpot_s or 0.0)
            if ms is None:
                preds.append(served[i] if served else Prediction(3_600_000.0, tpot))
            else:
                preds.append(Prediction(ms, tpot))
        p.preds, p.reason, p.version = preds, None, ORACLE_PATH

    def _oracle_decision(self, p: _Pending, decision: Decision, now: float) -> Decision:
        """The greedy TTFT oracle's ranking (bench/lab/oracle.py): the least of
        :meth:`_oracle_ttfts`."""
        assert self.oracle is not None
        pods = [self._pod_by_name[c.name] for c in p.prep.rows.candidates]
        ttfts = self._oracle_ttfts(p, now)
        ranked = self.oracle.rank(ttfts, [q.index for q in pods])
        if not ranked:  # no engine takes the prompt: it fails at the base profile's pick
            return decision
        scores = [None if t is None else -1000.0 * t for t in ttfts]  # minus the TTFT in ms
        return replace(decision, ranked=ranked, scores=scores, path=ORACLE_PATH,
                       notes={**decision.notes, "oracle_ttft_ms": -scores[ranked[0]]})  # fmt: skip

    def _submit(self, p: _Pending, now: float) -> None:
        """The request reached its pod (after HTTP and the pod's tokenizer)."""
        rec, req, pod, i = p.record, p.request, p.pod, p.chosen
        assert pod is not None and i is not None
        if self.on_submit is not None:
            self.on_submit(p.rid, pod.engine, p.prep.rows.rows[i], now)
        regret = self.regret
        if regret is not None and regret.wants(req.index):
            cands = [self._pod_by_name[c.name] for c in p.prep.rows.candidates]
            regret.on_decision(
                req.index, p.rid, p.tokens, req.output_tokens,
                [(c.index, c.driver) for c in cands], pod.index, now,
            )  # fmt: skip
        try:
            pod.engine.submit(p.rid, p.tokens, req.output_tokens, now)
        except ValueError as e:  # the pod answers 400 (prompt too long): no retry
            routing.on_refused(self.view, self.index, p.rid, p.prep, i, p.added)
            rec.status, rec.error = FAILED, str(e)
            return
        if regret is not None:
            regret.on_submit(pod.index, p.rid, p.tokens, req.output_tokens, now)
        row = p.prep.rows.rows[i]
        learner = self.learner
        if p.preds is not None:
            rec.p90_ttft_ms, rec.p90_tpot_ms = learner.quantile_row(row)  # type: ignore[union-attr]
        if learner is not None:
            rec.trained_samples = learner.samples
            twin = learner.twin
            if twin is not None and p.preds is not None:
                served = twin.predict([row])
                if served is not None:
                    rec.twin_ttft_ms, rec.twin_tpot_ms = served.ttft_ms[0], served.tpot_ms[0]
        self._open[p.rid] = _Open(rec, row)
        if pod.driver.kick(now):
            self._schedule_step(pod)

    def _later(self, t: float, handler: Callable[[_Pending, float], None], p: _Pending) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, handler, p))

    # --- results ------------------------------------------------------------------------
    def prefix_cache_hit_rate(self) -> float | None:
        hits = queries = 0
        for p in self.pods:
            s = p.engine.stats()
            hits += s.prefix_cache_hits
            queries += s.prefix_cache_queries
        return round(hits / queries, 5) if queries else None

    def preemptions(self) -> int:
        return sum(p.engine.stats().preemptions for p in self.pods)
