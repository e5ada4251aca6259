"""The gateway's state and its routing decision (the shell around scheduling/).

:class:`Gateway` owns the pod view, the prefix index, the metrics, the NATS connection, the
pods' HTTP session, the predictor client and the sample publisher. :meth:`Gateway.route`
turns a parsed request into a ranked list of pods, each with its exact feature row.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from services.gateway import limits, tracing
from services.gateway.access import FrontDoor
from services.gateway.breaker import BreakerConfig
from services.gateway.errors import GatewayError
from services.gateway.lifecycle import QUEUED, ROUTING, RequestLife
from services.gateway.metrics import GatewayMetrics
from services.gateway.openai_request import Kind, ParsedRequest
from services.gateway.outliers import OutlierEjector
from services.gateway.pod_allowlist import PodAllowlist, parse_list
from services.gateway.pod_client import PodClient
from services.gateway.predictor_client import PredictorClient
from services.gateway.prompt import request_tokens
from services.gateway.readiness import Readiness, readiness
from services.gateway.request_headers import RequestObjectives
from services.gateway.samples import SamplePublisher
from services.gateway.scheduling import routing
from services.gateway.scheduling.config import SchedulingConfig, load_config
from services.gateway.scheduling.flow import FlowQueue, QueueFull, Waiter
from services.gateway.scheduling.params import ConfigError
from services.gateway.scheduling.pod_view import Candidate, PodView
from services.gateway.scheduling.prediction import Prediction
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.scheduler import Scheduler
from services.gateway.settings import GatewaySettings
from services.gateway.upstream import CONNECT_BUSY
from shared.bus import BusAuthError, connect_nats, ensure_samples_stream
from shared.drift import DriftTracker
from shared.schemas import PodSnapshot, SchemaError
from shared.subjects import Names
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RoutedPod:
    index: int  # position among the cycle's candidates (routing.on_dispatch / on_refused)
    candidate: Candidate
    row: list[float]  # the exact feature row built for this pod
    prefix_score: float
    prediction: Prediction | None
    score: float | None = None  # the profile's combined score (None: filtered out)


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    ranked: list[RoutedPod]  # best first
    path: str  # what ranked the pods: predicted | cost-model | heuristic | fallback
    reason: str | None  # fallback reason
    model_version: str | None
    input_tokens: int
    prepared: routing.PreparedRequest  # the cycle's inputs (prefix hashes, rows, request)
    profile: str = ""
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    notes: Mapping[str, object] | None = None  # the plugins' notes (decision explanation)


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.tel = telemetry or Telemetry.disabled("gateway")
        self.names = Names(settings.namespace)
        self.rng = rng or random.Random()
        self.clock = clock
        self.metrics = GatewayMetrics()
        self.drift = DriftTracker(("ttft", "tpot"), size=1000)
        # the profiles file and the active profile are checked here: a bad config fails start
        self.scheduling: SchedulingConfig = load_config(settings.profiles_path or None)
        timer = tracing.plugin_timer(self.metrics.plugin_timer(), self.tel)
        self.schedulers: dict[str, Scheduler] = {
            name: self.scheduling.scheduler(name, timer) for name in self.scheduling.profiles
        }
        if settings.profile not in self.schedulers:
            raise ConfigError(
                f"{self.scheduling.source}: unknown profile '{settings.profile}' "
                f"(known: {', '.join(self.schedulers)})"
            )
        # API keys, privileged-header policy, rate limits, pod credentials (access.py)
        self.front = FrontDoor(
            settings, self.names, self.metrics.registry, self.schedulers, self.prompt_tokens
        )
        self.view = PodView.from_settings(settings)
        # flow control per profile that enables it (services/gateway/scheduling/flow.py);
        # the view's change hook releases queued requests as pods make room
        self.flows: dict[str, FlowQueue] = {
            name: FlowQueue(cfg)
            for name in self.scheduling.profiles
            if (cfg := self.scheduling.flow(name)).enabled
        }
        if self.flows:
            self.view.on_change = self._pump
        self.index = PrefixIndex(
            settings.prefix_block_tokens,
            settings.prefix_index_blocks,
            settings.prefix_index_auto_capacity,
        )
        self.outliers = OutlierEjector(
            settings.pod_eject_s,
            max(settings.pod_eject_max_s, settings.pod_eject_s),
            settings.pod_eject_max_fraction,
        )
        self.allowlist = PodAllowlist(
            parse_list(settings.pod_allow_cidrs), parse_list(settings.pod_allow_urls)
        )
        self._discovery = None  # the allowlist's Kubernetes watch, when configured
        self._refusals_logged: dict[str, float] = {}  # url -> last warning (bounded)
        self.nc: NATS | None = None
        self.pod_client: PodClient | None = None  # keep-alive HTTP to the pods
        self.predictor: PredictorClient | None = None
        self.samples: SamplePublisher | None = None
        self._model_version: str | None = None  # last version the predictors answered with
        self.start_error: BaseException | None = None  # why start() failed (server.py says it)
        self.started = False  # the lifespan has started (NATS connected, stream ensured)
        self.draining = False  # SIGTERM: refuse new requests, let running ones finish
        self._nats_down_since: float | None = None  # monotonic seconds
        # decoding and tokenizing large bodies (services/gateway/limits.py): few threads, so
        # the event loop's thread still gets the GIL most of the time
        self._offload = ThreadPoolExecutor(
            max_workers=settings.offload_threads, thread_name_prefix="gateway-offload"
        )

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        if s.pod_allow_k8s_label_selector:
            from services.collector.k8s_discovery import KubernetesDiscovery

            disc = KubernetesDiscovery(
                s.pod_allow_k8s_label_selector, namespace=s.pod_allow_k8s_namespace,
                port=s.pod_allow_k8s_port, scheme=s.pod_allow_k8s_scheme,
                api_url=s.pod_allow_k8s_api_url,
            )  # fmt: skip
            await disc.start()
            self._discovery = disc
            self.allowlist.discovered = lambda: (t.url for t in disc.targets())
        if not self.allowlist.enforced:
            log.warning("no pod allowlist (HEADROOM_GATEWAY_POD_ALLOW_*): any pod a snapshot "
                        "on NATS names may be routed to")  # fmt: skip
        await self.front.start()  # key-file watch, rate limiter (the files were read in __init__)
        try:
            self.nc = await connect_nats(
                s, f"gateway-{s.pool}",
                on_disconnected=self._nats_lost, on_reconnected=self._nats_back,
            )  # fmt: skip
        except BusAuthError as e:
            self.start_error = e
            raise
        js = self.nc.jetstream()
        await ensure_samples_stream(js, self.names)
        self.predictor = PredictorClient(
            self.nc,
            self.names.predict,
            s.predict_timeout_ms / 1000,
            registry=self.metrics.registry,
            telemetry=self.tel,
            breaker=BreakerConfig(
                s.predict_breaker_failures,
                s.predict_breaker_open_s,
                max(s.predict_breaker_max_open_s, s.predict_breaker_open_s),
            ),
        )
        self.samples = SamplePublisher(
            self.nc,
            self.names.samples(s.pool),
            self.metrics,
            s.sample_publish_timeout_s,
            linger_s=s.sample_linger_ms / 1000,
            max_batch=s.sample_max_batch,
            telemetry=self.tel,
            max_pending=s.sample_max_pending,
        )
        await self.samples.start()
        await self.nc.subscribe(self.names.pod_snapshots(s.pool), cb=self._on_snapshot_msg)
        self.pod_client = PodClient(
            connect_timeout_s=s.pod_connect_timeout_s, read_timeout_s=s.pod_read_timeout_s,
            first_byte_timeout_s=s.pod_first_byte_timeout_s or None,
        )  # fmt: skip
        self.started = True
        log.info("gateway started (namespace=%s pool=%s)", s.namespace, s.pool)

    async def stop(self) -> None:
        if self._discovery is not None:
            await self._discovery.stop()
        self._offload.shutdown(wait=False, cancel_futures=True)
        await self.front.stop()
        if self.samples is not None:
            await self.samples.drain()
        if self.pod_client is not None:
            await self.pod_client.close()
        if self.nc is not None and not self.nc.is_closed:
            try:
                await self.nc.drain()
            except Exception as e:  # already closing
                log.debug("nats drain: %s", e)
                await self.nc.close()

    @property
    def nats_connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    def _nats_lost(self) -> None:
        if self._nats_down_since is None:
            self._nats_down_since = time.monotonic()

    def _nats_back(self) -> None:
        self._nats_down_since = None

    def nats_down_s(self) -> float:
        """How long NATS has been disconnected (0 while connected)."""
        if self.nats_connected:
            self._nats_down_since = None
            return 0.0
        if self._nats_down_since is None:
            self._nats_down_since = time.monotonic()
        return time.monotonic() - self._nats_down_since

    def readiness(self) -> Readiness:
        """GET /readyz (services/gateway/readiness.py)."""
        return readiness(
            started=self.started,
            draining=self.draining,
            nats_connected=self.nats_connected,
            nats_down_s=self.nats_down_s(),
            ready_pods=self.view.counts(self.clock()).ready,
            grace_s=self.settings.nats_outage_grace_s,
        )

    def begin_drain(self) -> None:
        """SIGTERM: readiness turns false and new requests are refused from now on."""
        if not self.draining:
            self.draining = True
            log.info("gateway draining: new requests are refused, running ones may finish")

    def draining_error(self) -> GatewayError:
        return GatewayError(
            503, "This gateway replica is shutting down; retry the request",
            type="service_unavailable", code="draining",
            headers={"Retry-After": str(self.settings.retry_after_s), "connection": "close"},
        )  # fmt: skip

    # --- pod snapshots ------------------------------------------------------------------
    async def _on_snapshot_msg(self, msg: Msg) -> None:
        self.on_snapshot(msg.data)

    def on_snapshot(self, data: bytes) -> None:
        try:
            snap = PodSnapshot.decode(data)
        except SchemaError as e:
            self.metrics.snapshots_invalid.labels(e.reason).inc()
            log.warning("dropped invalid pod snapshot: %s", e)
            return
        if snap.pool != self.settings.pool:
            self.metrics.snapshots_invalid.labels("wrong_pool").inc()
            return
        refused = self.allowlist.refusals(p.url for p in snap.pods)
        if refused:  # a snapshot must not send prompts anywhere: drop all of it
            self.metrics.snapshots_invalid.labels("pod_not_allowed").inc()
            for url, why in refused:
                self.metrics.pods_refused.labels(why).inc()
                self._log_refusal(url, why)
            return
        self.view.apply_snapshot(snap)
        self.index.sync(snap.pods)
        self.metrics.snapshots.inc()
        self.update_pod_gauges()

    def _log_refusal(self, url: str, why: str) -> None:
        """A warning per refused pod URL at most once a minute (at most 256 URLs kept)."""
        now = time.monotonic()
        if now - self._refusals_logged.get(url, -1e9) < 60.0:
            return
        if len(self._refusals_logged) >= 256:
            self._refusals_logged.clear()
        self._refusals_logged[url] = now
        log.warning("dropped a pod snapshot naming %s, which the pod allowlist does not admit "
                    "(%s)", url, why)  # fmt: skip

    def pod_failed(self, pod: str, reason: str) -> None:
        """A request to ``pod`` failed (before its first byte or mid-stream): leave the pod
        out of routing for a while (services/gateway/outliers.py). Not for a connect that
        timed out while the pod was sending us data (``connect_busy``): the pod is alive and
        slow to accept under load, and leaving it out would push its load onto the others."""
        if reason == CONNECT_BUSY:
            self.metrics.pods_busy.inc()
            return
        if self.outliers.enabled:
            span = self.outliers.failed(pod, self.clock())
            self.metrics.pod_ejections.labels(reason).inc()
            log.warning("pod %s left out of routing for %.0f s after a failed request (%s)",
                        pod, span, reason)  # fmt: skip

    def update_pod_gauges(self) -> None:
        counts = self.view.counts(self.clock())
        self.metrics.pods.labels("ready").set(counts.ready)
        self.metrics.pods.labels("not_ready").set(counts.not_ready)
        self.metrics.pods.labels("stale").set(counts.stale)
        self.metrics.pods.labels("missed").set(counts.missed)
        self.metrics.prefix_index_blocks.labels("held").set(self.index.total_blocks())
        self.metrics.prefix_index_blocks.labels("capacity").set(self.index.total_capacity())

    # --- request intake -----------------------------------------------------------------
    async def offloaded(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the offload thread."""
        gauge = self.metrics.offloaded
        gauge.inc()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._offload, fn, *args)
        finally:
            gauge.dec()

    async def prompt_tokens(self, req: ParsedRequest) -> tuple[list[int], int]:
        """The request's prompt tokens and its longest prompt's length, tokenized once (a
        large body in the offload thread) and kept on the request."""
        if req.tokens is None:
            if req.size > self.settings.offload_bytes:
                req.tokens = await self.offloaded(request_tokens, req.prompts, True)
            else:
                req.tokens = request_tokens(req.prompts)
        return req.tokens

    async def read_request(
        self,
        receive: Callable,
        headers: Mapping[str, str],
        kind: Kind,
        on_body: Callable[[], None] | None = None,
    ) -> ParsedRequest:
        """Read, decode and check the request body against the limits (a large one in the
        offload thread); ``on_body()`` once the body is in. Raises GatewayError (400/413)
        before anything reaches a pod, asgi.ClientDisconnected if the client leaves while
        the body is read."""
        s = self.settings
        raw = await limits.read_body(receive, headers, s.max_body_bytes)
        if on_body is not None:
            on_body()
        if len(raw) > s.offload_bytes:
            return await self.offloaded(limits.parse_limited, raw, kind, s)
        return limits.parse_limited(raw, kind, s)

    def _fitting(self, cands: list[Candidate], req: ParsedRequest, longest: int) -> list[Candidate]:
        """The candidates whose context length (reported by the pod, else the default) fits
        the request; GatewayError 400 when none does."""
        need = limits.context_need(req, longest)
        default = self.settings.default_context_length
        fit = [c for c in cands if need <= context_length(c, default)]
        if len(fit) == len(cands):
            return cands
        if fit:
            return fit
        raise limits.context_error(req, longest, max(context_length(c, default) for c in cands))

    # --- routing ------------------------------------------------------------------------
    async def route(
        self,
        req: ParsedRequest,
        objectives: RequestObjectives | None = None,
        life: RequestLife | None = None,
    ) -> RoutingDecision:
        """Rank the candidate pods for ``req`` with the active (or requested) profile
        (``life``: the request's stage is ``queued`` while it waits in the flow-control
        queue). Raises GatewayError 404/503 (no pod, or shed by an admitter)."""
        if not self.tel.enabled:
            return await self._route(req, objectives, life)
        with self.tel.span(
            "gateway.route",
            attributes={
                "gen_ai.request.model": req.model,
                "gen_ai.request.max_tokens": req.max_tokens or self.settings.default_max_tokens,
                "headroom.pool": self.settings.pool,
                "headroom.streaming": req.stream,
            },
        ) as span:
            decision = await self._route(req, objectives, life)
            span.set_attributes(tracing.decision_attributes(decision))
            return decision

    async def _route(
        self, req: ParsedRequest, objectives: RequestObjectives | None, life: RequestLife | None
    ) -> RoutingDecision:
        obj = objectives or RequestObjectives()
        now = self.clock()
        cands = self.outliers.filter(self.view.candidates(req.model, now), now)
        if not cands:
            raise self._no_candidate_error(req.model, now)
        if req.tokens is None and req.size > self.settings.offload_bytes:
            tokens, longest = await self.prompt_tokens(req)
            # the loads changed while the prompt was tokenized (requests of the same burst
            # were dispatched meanwhile): read them again, or the burst lands on one pod
            later = self.clock()
            cands = self.outliers.filter(self.view.candidates(req.model, later), later) or cands
        else:
            tokens, longest = await self.prompt_tokens(req)
        cands = self._fitting(cands, req, longest)
        profile = obj.profile or self.settings.profile
        flow = self.flows.get(profile)
        if flow is None:
            return await self._decide(req, obj, profile, cands, tokens)
        hashes = self.index.hashes(tokens)
        waiter = await self._queue(flow, profile, req, obj, cands, tokens, hashes, life)
        try:
            now = self.clock()
            cands = flow.route_among(
                waiter, self.outliers.filter(self.view.candidates(req.model, now), now)
            )
            if not cands:
                raise self._no_candidate_error(req.model, self.clock())
            cands = self._fitting(cands, req, longest)
            return await self._decide(req, obj, profile, cands, tokens, hashes, waiter)
        finally:
            flow.routed(waiter)  # the proxy dispatches before the loop runs anything else

    async def _queue(
        self,
        flow: FlowQueue,
        profile: str,
        req: ParsedRequest,
        obj: RequestObjectives,
        cands: list[Candidate],
        tokens: list[int],
        hashes: list[int],
        life: RequestLife | None = None,
    ) -> Waiter:
        """Wait in the profile's flow-control queue until released (at once when a pod has
        room); 503 when the queue is full. A cancellation (the client left) takes it out of
        the queue at once."""
        now = self.clock()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        w = routing.waiter(
            self.scheduling, self.view.cost, self.index, cands, tokens, hashes,
            model=req.model, now=now, priority=obj.priority, slo_ttft_ms=obj.slo_ttft_ms,
            payload=future,
        )  # fmt: skip
        try:
            released = flow.offer(w, cands, now)
        except QueueFull as e:
            self.metrics.queue_rejected.labels(profile).inc()
            raise GatewayError(
                503, f"request refused: the gateway's queue is full ({e}); retry later",
                type="service_unavailable", code="queue_full",
                headers={"Retry-After": str(self.settings.retry_after_s)},
            ) from None  # fmt: skip
        if not released:
            self.metrics.queued.labels(profile).set(flow.queued)
            if life is not None:
                life.stage = QUEUED
            try:
                await future
            except BaseException:  # the client went away (cancelled) while queued
                flow.cancel(w)
                self.metrics.queued.labels(profile).set(flow.queued)
                raise
            finally:  # the queue may keep a released entry a while: not its future
                w.payload = None
            if life is not None:
                life.stage = ROUTING
        w.payload = None
        self.metrics.queue_wait.labels(w.reason or "room").observe(w.queued_s())
        return w

    def _pump(self) -> None:
        """The view's change hook: release what each flow-control queue lets go now."""
        now = self.clock()
        for profile, flow in self.flows.items():
            if not flow.queued:
                continue
            released = flow.take(lambda m: self.view.candidates(m, now), now)
            for w in released:
                fut = w.payload
                if isinstance(fut, asyncio.Future) and not fut.done():
                    fut.set_result(None)
            if released:
                self.metrics.queued.labels(profile).set(flow.queued)

    async def _decide(
        self,
        req: ParsedRequest,
        obj: RequestObjectives,
        profile: str,
        cands: list[Candidate],
        tokens: list[int],
        hashes: list[int] | None = None,
        waiter: Waiter | None = None,
    ) -> RoutingDecision:
        """Prepare, predict and schedule one request over ``cands``."""
        prep = routing.prepare(
            self.scheduling, self.schedulers, self.index, cands, tokens,
            model=req.model, profile=profile,
            max_tokens=req.decode_tokens(self.settings.default_max_tokens),
            streaming=req.stream, slo_ttft_ms=obj.slo_ttft_ms, slo_tpot_ms=obj.slo_tpot_ms,
            priority=obj.priority, cost=self.view.cost, hashes=hashes,
            queued_s=waiter.queued_s() if waiter is not None else 0.0,
            gateway_queued=self._queued(profile),
        )  # fmt: skip
        sched, cr = prep.scheduler, prep.rows

        preds: list[Prediction] | None = None
        reason = version = None
        if sched.reads_predictions(prep.request):  # only when a plugin reads them
            assert self.predictor is not None, "gateway not started"
            timeout_ms = self.settings.predict_timeout_ms
            if sched.predict_budget_ms is not None:
                timeout_ms = min(timeout_ms, sched.predict_budget_ms)
            t0 = time.perf_counter()
            outcome = await self.predictor.predict(cr.rows, timeout_s=timeout_ms / 1000)
            self.metrics.predict_seconds.observe(time.perf_counter() - t0)
            preds, reason, version = outcome.predictions, outcome.reason, outcome.model_version
            if version is not None and version != self._model_version:
                self._model_version = version
                self.metrics.set_model_version(version)

            # requests of the same burst were dispatched during the call: their loads now
            later = self.clock()
            prep = routing.refresh(prep, self.view.candidates(req.model, later))
            cr = prep.rows
        with self.tel.span("gateway.schedule", attributes={"headroom.profile": profile}):
            t0 = time.perf_counter()
            decision = routing.decide(
                prep, preds, now=self.clock(), rng=self.rng, fallback_reason=reason
            )
            self.metrics.schedule_seconds.labels(profile).observe(time.perf_counter() - t0)
        self.metrics.routing.labels(decision.path, decision.fallback_reason or "ok").inc()
        if not decision.admitted:
            why = decision.reject_reason or "rejected"
            self.metrics.shed.labels(req.model, why).inc()
            raise GatewayError(
                503, decision.reject_message or f"request shed: {why}",
                type="service_unavailable", code=why,
                headers={"Retry-After": str(self.settings.retry_after_s)},
            )  # fmt: skip
        scores = decision.scores
        ranked = [
            RoutedPod(
                i,
                cr.candidates[i],
                cr.rows[i],
                cr.prefix_scores[i],
                preds[i] if preds else None,
                scores[i],
            )
            for i in decision.ranked
        ]
        return RoutingDecision(
            ranked, decision.path, decision.fallback_reason, version if preds else None,
            len(tokens), prep, profile, obj.slo_ttft_ms, obj.slo_tpot_ms, decision.notes,
        )  # fmt: skip

    def _queued(self, profile: str) -> int:
        """Requests waiting in ``profile``'s flow-control queue (0 without flow control)."""
        flow = self.flows.get(profile)
        return flow.queued if flow is not None else 0

    def _no_candidate_error(self, model: str, now: float) -> GatewayError:
        retry = {"Retry-After": str(self.settings.retry_after_s)}
        if self.view.counts(now).ready > 0 and model not in self.view.known_models():
            return GatewayError(
                404, f"The model '{model}' does not exist or is not served by any pod",
                type="not_found_error", code="model_not_found", param="model",
            )  # fmt: skip
        return GatewayError(
            503, f"No ready pod serves the model '{model}'; retry later",
            type="service_unavailable", code="no_ready_pod", headers=retry,
        )  # fmt: skip


def context_length(c: Candidate, default: int) -> int:
    """The pod's context length: its reported max_model_len, else ``default``."""
    rec = c.record
    n = rec.max_model_len if rec is not None else None
    return n if n else default
