"""The collector's scrape loop and its NATS/HTTP shell.

:class:`Collector` runs cycles: every interval it starts a scrape of each discovered pod that
has no scrape in flight, waits for them until the cycle's deadline, and publishes one
:class:`PodSnapshot` holding each pod's latest record. All pods are scraped concurrently; a
slow pod never delays the snapshot beyond one interval (its previous record is carried, with
its old ``scraped_at``, until its own scrape finishes or times out) and never has two scrapes
in flight, so cycles cannot pile up. The first cycle waits up to the scrape timeout so the
first snapshot holds a real result for every pod.

:class:`CollectorService` wires it to NATS, an aiohttp session (keep-alive) and the admin
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from nats.aio.client import Client as NATS
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.autoscale.hpa import Behavior
from services.autoscale.signals import PodLoad, Recommender, pool_signals
from services.collector.discovery import Discovery, PodTarget, StaticDiscovery
from services.collector.metrics import CollectorMetrics
from services.collector.scraper import ScrapeOutcome, Scraper, error_record
from services.collector.settings import CollectorSettings
from shared.admin import start_admin_server
from shared.bus import connect_nats, redact_url
from shared.schemas import PodRecord, PodSnapshot
from shared.subjects import Names
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)

Publish = Callable[[PodSnapshot], Awaitable[None]]


def pending_record(target: PodTarget, engine: str, now: float) -> PodRecord:
    """A newly discovered pod whose first scrape has not finished yet."""
    return PodRecord(
        name=target.name,
        url=target.url,
        ready=False,
        scraped_at=now,
        engine=engine,
        error="pending: first scrape not finished",
        error_reason="pending",
    )


class Collector:
    def __init__(
        self,
        discovery: Discovery,
        scraper: Scraper,
        publish: Publish,
        *,
        pool: str,
        interval_s: float,
        metrics: CollectorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        recommender: Recommender | None = None,
        max_batch_slots: int = 0,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.tel = telemetry or Telemetry.disabled("collector")
        self._discovery = discovery
        self._scraper = scraper
        self._publish = publish
        self.pool = pool
        self.interval_s = interval_s
        self.metrics = metrics or CollectorMetrics()
        self._clock = clock
        self._latest: dict[str, PodRecord] = {}
        self._loads: dict[str, PodLoad] = {}
        self.recommender = recommender
        self.max_batch_slots = max_batch_slots
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._reasons: dict[str, set[str]] = {}
        self._current: set[str] = set()
        self.cycles = 0
        self.last_snapshot: PodSnapshot | None = None

    # --- one pod -------------------------------------------------------------------------
    def _record_outcome(self, name: str, outcome: ScrapeOutcome, started_ns: int = 0) -> None:
        m = self.metrics
        m.scrape_duration.labels(name).observe(outcome.duration_s)
        if outcome.ignored_lines:
            m.parse_ignored.inc(outcome.ignored_lines)
        if outcome.reason is not None:
            m.scrape_errors.labels(name, outcome.reason).inc()
            self._reasons.setdefault(name, set()).add(outcome.reason)
            prev = self._latest.get(name)
            if prev is None or prev.ready:
                log.warning("pod %s not ready: %s", name, outcome.record.error, extra={"pod": name})
                self._trace_scrape(outcome, started_ns)
        elif self.tel.enabled and outcome.duration_s > self.interval_s:
            self._trace_scrape(outcome, started_ns)  # slower than the snapshot interval
        elif (prev := self._latest.get(name)) is not None and not prev.ready:
            log.info("pod %s ready again", name, extra={"pod": name})
        self._latest[name] = outcome.record
        self._loads[name] = self._load(outcome)

    def _trace_scrape(self, outcome: ScrapeOutcome, started_ns: int) -> None:
        """A span for a scrape worth a look (the pod turned not ready, or it was slower than
        the interval), recorded after the fact: healthy cycles (10 a second) emit none."""
        if not self.tel.enabled or not started_ns:
            return
        rec = outcome.record
        span = self.tel.tracer.start_span(
            f"scrape {rec.name}",
            kind=SpanKind.CLIENT,
            start_time=started_ns,
            attributes={
                "headroom.pool": self.pool,
                "headroom.pod": rec.name,
                "url.full": rec.url,
                "headroom.engine": rec.engine,
                "headroom.scrape.reason": outcome.reason or "slow",
            },
        )
        if outcome.reason is not None:
            span.set_status(Status(StatusCode.ERROR, rec.error or outcome.reason))
            span.set_attribute("error.type", outcome.reason)
        span.end(end_time=started_ns + int(outcome.duration_s * 1e9))

    def _load(self, outcome: ScrapeOutcome) -> PodLoad:
        r = outcome.result
        if r is None or not outcome.record.ready:
            return PodLoad(ready=False)
        slots = r.slots_used
        if slots is None and self.max_batch_slots > 0:
            slots = min(1.0, r.running / self.max_batch_slots)
        return PodLoad(True, r.prefill_backlog, slots, r.kv_usage)

    async def _scrape(self, target: PodTarget) -> None:
        started_ns = time.time_ns()
        try:
            outcome = await self._scraper.scrape(target)
        except Exception as e:  # a bug in the scraper must not kill the loop
            log.exception("scrape of %s failed unexpectedly", target.name)
            record = error_record(
                target, self._scraper.engine, f"internal: {e!r}", self._clock(), "internal"
            )
            outcome = ScrapeOutcome(record=record, duration_s=0.0, reason="internal")
        if target.name in self._current:  # drop results of pods that left meanwhile
            self._record_outcome(target.name, outcome, started_ns)

    def _sync_targets(self, targets: list[PodTarget]) -> None:
        names = {t.name for t in targets}
        for gone in self._current - names:
            task = self._inflight.pop(gone, None)
            if task is not None:
                task.cancel()
            self._latest.pop(gone, None)
            self._loads.pop(gone, None)
            self._scraper.forget(gone)
            self.metrics.forget_pod(gone, self._reasons.pop(gone, set()))
        self._current = names

    # --- one cycle -----------------------------------------------------------------------
    async def run_cycle(self, wait_s: float) -> PodSnapshot:
        """Scrape (concurrently) every pod not already being scraped, wait up to ``wait_s``
        for those scrapes, then publish and return the snapshot."""
        started_at = time.perf_counter()
        targets = list(self._discovery.targets())
        self._sync_targets(targets)
        started: list[asyncio.Task[None]] = []
        for t in targets:
            task = self._inflight.get(t.name)
            if task is None or task.done():
                task = asyncio.create_task(self._scrape(t), name=f"scrape-{t.name}")
                self._inflight[t.name] = task
                started.append(task)
        if started:
            await asyncio.wait(started, timeout=wait_s)
        now = self._clock()
        engine = self._scraper.engine
        pods = [self._latest.get(t.name) or pending_record(t, engine, now) for t in targets]
        snap = PodSnapshot(pool=self.pool, ts=now, pods=pods)
        try:
            await self._publish(snap)
            self.metrics.snapshots_published.inc()
        except Exception:
            self.metrics.publish_errors.inc()
            log.exception("publishing the pod snapshot failed")
        for p in pods:
            self.metrics.staleness.labels(p.name).set(max(0.0, now - p.scraped_at))
        self.metrics.pods_ready.set(sum(1 for p in pods if p.ready))
        self.metrics.pods_total.set(len(pods))
        self._export_signals(targets, now)
        self.metrics.cycle_duration.observe(time.perf_counter() - started_at)
        self.cycles += 1
        self.last_snapshot = snap
        return snap

    def _export_signals(self, targets: list[PodTarget], now: float) -> None:
        """Per-pool autoscaling gauges and each strategy's HPA recommendation."""
        signals = pool_signals(self._loads.get(t.name) or PodLoad(False) for t in targets)
        recs = self.recommender.update(now, signals) if self.recommender else []
        self.metrics.set_pool_signals(self.pool, signals, recs)

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle every ``interval_s`` until ``stop`` is set; missed ticks are skipped."""
        loop = asyncio.get_running_loop()
        first = True
        next_tick = loop.time()
        try:
            while not stop.is_set():
                wait_s = self._scraper.timeout_s if first else self.interval_s * 0.9
                first = False
                await self.run_cycle(wait_s)
                next_tick += self.interval_s
                now = loop.time()
                if next_tick < now:  # overran: skip the missed ticks, never burst
                    next_tick = now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_tick - now))
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        tasks = list(self._inflight.values())
        self._inflight.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def make_discovery(s: CollectorSettings) -> Discovery:
    if s.discovery == "kubernetes":
        from services.collector.k8s_discovery import KubernetesDiscovery

        return KubernetesDiscovery(
            s.k8s_label_selector,
            namespace=s.k8s_namespace,
            port=s.k8s_target_port,
            scheme=s.k8s_scheme,
            metrics_port=s.k8s_metrics_port,
            metrics_path=s.metrics_path,
            api_url=s.k8s_api_url,
            watch_timeout_s=s.k8s_watch_timeout_s,
            hardware_class_label=s.k8s_hardware_class_label,
        )
    return StaticDiscovery(s.pod_targets())


def make_recommender(s: CollectorSettings) -> Recommender:
    return Recommender(
        {
            "prefill-backlog": s.autoscale_target_prefill_backlog,
            "slots-used": s.autoscale_target_slots_used,
            "kv-usage": s.autoscale_target_kv_usage,
        },
        Behavior(
            min_replicas=s.autoscale_min_replicas,
            max_replicas=s.autoscale_max_replicas,
            tolerance=s.autoscale_tolerance,
            scale_up_window_s=s.autoscale_scale_up_window_s,
            scale_down_window_s=s.autoscale_scale_down_window_s,
        ),
    )


class CollectorService:
    """NATS connection + HTTP session + admin server around a :class:`Collector`."""

    def __init__(
        self,
        settings: CollectorSettings,
        discovery: Discovery | None = None,
        *,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.tel = telemetry or Telemetry.disabled("collector")
        self.names = Names(settings.namespace)
        self.subject = self.names.pod_snapshots(settings.pool)
        self.discovery = discovery or make_discovery(settings)
        # the pods' API key for their model list; a bad key file stops start-up here
        self._pod_credentials = settings.pod_credentials()
        self._pod_credentials.load()
        self.metrics = CollectorMetrics()
        self.collector: Collector | None = None
        self._nc: NATS | None = None
        self._session: aiohttp.ClientSession | None = None
        self._admin: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def health(self) -> dict:
        c = self.collector
        connected = self._nc is not None and self._nc.is_connected
        cycles = c.cycles if c else 0
        snap = c.last_snapshot if c else None
        return {
            "ready": connected and cycles > 0,
            "nats_connected": connected,
            "cycles": cycles,
            "pods": len(snap.pods) if snap else 0,
            "pods_ready": sum(1 for p in snap.pods if p.ready) if snap else 0,
        }

    async def _publish(self, snap: PodSnapshot) -> None:
        assert self._nc is not None
        await self._nc.publish(self.subject, snap.encode())

    async def start(self) -> None:
        s = self.settings
        self._admin = await start_admin_server(
            s.admin_host, s.admin_port, self.metrics.registry, self.health
        )
        log.info("connecting to NATS at %s", redact_url(s.nats_url))
        self._nc = await connect_nats(s, f"collector-{s.pool}")
        timeout_s = s.scrape_timeout_ms / 1000
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=max(30.0, timeout_s)),
            headers={"Accept": "text/plain;version=0.0.4"},
        )
        await self.discovery.start()
        scraper = Scraper(
            self._session,
            engine=s.engine,
            timeout_s=timeout_s,
            metrics_path=s.metrics_path,
            max_body_bytes=s.max_body_bytes,
            model_info_path=s.model_info_path,
            model_info_refresh_s=s.model_info_refresh_s,
            credentials=self._pod_credentials,
        )
        self.collector = Collector(
            self.discovery,
            scraper,
            self._publish,
            pool=s.pool,
            interval_s=s.scrape_interval_ms / 1000,
            metrics=self.metrics,
            recommender=make_recommender(s),
            max_batch_slots=s.max_batch_slots,
            telemetry=self.tel,
        )
        self._task = asyncio.create_task(self.collector.run(self._stop), name="collector-loop")
        log.info(
            "collector started: pool=%s pods=%d subject=%s interval=%sms",
            s.pool,
            len(self.discovery.targets()),
            self.subject,
            s.scrape_interval_ms,
        )

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self.discovery.stop()
        if self._session is not None:
            await self._session.close()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.drain()
        if self._admin is not None:
            await self._admin.cleanup()
