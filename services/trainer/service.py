"""The trainer's asyncio shell: JetStream consumer -> window -> periodic cycle -> Redis + announce.

Each sample is acknowledged only after it is in the window (or, if invalid, terminated after
it is counted), so a crash never loses a sample the window did not see; a restart rebuilds
the window by replaying the stream (services/trainer/replay.py). Training cycles run in a
worker thread; the consumer keeps draining the stream meanwhile. A candidate becomes a new
version only if it is not worse than the current one (services/trainer/cycle.py); every
decision is logged, counted and recorded in the Redis history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import orjson
from aiohttp import web
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry.trace import Link, SpanContext, SpanKind

from services.trainer.cycle import PROMOTE, REJECT, CycleResult, build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData, refit_gate
from services.trainer.metrics import TrainerMetrics
from services.trainer.replay import delivered_upto, replay_history
from services.trainer.settings import TrainerSettings
from services.trainer.validation import check, decode_sample
from services.trainer.window import ADDED, DUPLICATE, EXPIRED, FLUSHED, WindowEntry
from shared import trace_context
from shared.admin import add_admin_routes
from shared.bus import check_redis, connect_nats, connect_redis, ensure_samples_stream
from shared.drift import DriftTracker
from shared.latency_model import LatencyModel
from shared.model_store import (
    VersionExists,
    append_history,
    current_version,
    import_model_file,
    next_version,
    publish_version,
    read_version,
)
from shared.schemas import ModelAnnouncement, ModelMeta, SchemaError
from shared.subjects import Names
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)

_ACKED_REJECTIONS = (DUPLICATE, EXPIRED, FLUSHED)  # valid samples the window need not keep


def cycle_on_entries(
    entries: tuple[WindowEntry, ...], current: LatencyModel | None, config: FitConfig, seed: int
) -> CycleResult:
    """Arrays + one cycle, in the worker thread."""
    return run_cycle(TrainingData.from_entries(entries), current, config, seed=seed)


def _fit_attributes(
    result: CycleResult, current: LatencyModel | None, version: str | None
) -> dict[str, str | int | float]:
    attrs: dict[str, str | int | float] = {
        "headroom.trainer.decision": result.decision,
        "headroom.trainer.reason": result.reason,
        "headroom.trainer.samples": result.samples,
        "headroom.trainer.holdout": result.holdout,
    }
    if current is not None:
        attrs["headroom.model.current_version"] = current.version
    if version is not None:
        attrs["headroom.model.version"] = version
    for key, mt in result.metrics.items():
        if mt.get("mape") is not None:
            attrs[f"headroom.trainer.mape.{key}"] = float(mt["mape"])
    return attrs


class TrainerService:
    def __init__(
        self,
        settings: TrainerSettings,
        *,
        metrics: TrainerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
    ) -> None:
        s = settings
        self.tel = telemetry or Telemetry.disabled("trainer")
        # trace contexts of the samples added since the last cycle: the fit span links them
        self._sample_contexts: deque[SpanContext] = deque(maxlen=trace_context.MAX_LINKS)
        self.settings = s
        self.names = Names(s.namespace)
        self.metrics = metrics or TrainerMetrics()
        self.window = s.sample_window()
        self.config = s.fit_config()
        self.limits = s.limits()
        self.drift = DriftTracker(("ttft", "tpot"), s.drift_window)
        self.shift = s.shift_detector()
        self.shift_refit: asyncio.Task | None = None
        self.clock = clock
        self.last_version: str | None = None
        self.last_result: CycleResult | None = None
        self._current: LatencyModel | None = None
        # metadata and blobs of the version last seen current in Redis: written back if
        # Redis loses it (restarted empty), so the deployment keeps its model and its ids
        self._served: tuple[ModelMeta, dict[str, bytes]] | None = None
        self._fitted_at_added = 0  # window.added_total at the last cycle
        self._evicted_seen = dict(self.window.evicted)
        self._fit_lock = asyncio.Lock()
        self._nc: NATS | None = None
        self._redis = None
        self._psub = None
        self._admin: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = asyncio.Event()

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self._redis = connect_redis(s)
        await check_redis(self._redis, s.redis_url, "trainer")
        flushed_at = await self._redis.get(self.names.trainer_flushed_at)
        if flushed_at:
            self.window.not_before = float(flushed_at)
        self._nc = await connect_nats(s, "headroom-trainer")
        js = self._nc.jetstream()
        await ensure_samples_stream(js, self.names)
        self._psub = await js.pull_subscribe(
            self.names.samples_wildcard,
            durable=self.names.trainer_durable,
            stream=self.names.samples_stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=s.ack_wait_s,
                max_ack_pending=max(4 * s.fetch_batch, 1024),
            ),
        )
        if s.replay_on_start:
            replayed = await replay_history(
                js,
                self.names,
                lambda data: self.admit(data, replay=True) == ADDED,
                upto_seq=await delivered_upto(js, self.names),
                max_messages=s.replay_max,
                batch=s.fetch_batch,
                fetch_timeout_s=s.fetch_timeout_s,
                budget_s=s.replay_budget_s,
            )
            self._fitted_at_added = self.window.added_total  # the stored model saw these
            log.info("window rebuilt from the stream: %d samples", replayed)
        self._sync_window_metrics()
        if s.warm_start_file:
            await self._warm_start(s.warm_start_file)
        try:  # remember the current version now: it is written back if Redis loses it
            await self.current_model()
        except Exception as e:  # Redis down: learnt at the first cycle instead
            log.warning("could not read the current model: %s", e)
        await self._nc.subscribe(self.names.trainer_flush, cb=self._on_flush)
        self._admin = await self._start_admin()
        self._tasks = [
            asyncio.create_task(self._consume_loop(), name="trainer-consume"),
            asyncio.create_task(self._fit_loop(), name="trainer-fit"),
            asyncio.create_task(self._guard_loop(), name="trainer-model-guard"),
        ]
        log.info("trainer started (namespace %s, admin port %s)", s.namespace, self.admin_port)

    async def _start_admin(self) -> web.AppRunner:
        app = web.Application()
        add_admin_routes(app, self.metrics.registry, self.health)

        async def _flush(_: web.Request) -> web.Response:
            return web.json_response(await self.flush())

        async def _window_ids(_: web.Request) -> web.Response:
            # what the window holds, by request id (diagnostics: `headroom bench faults`
            # checks with it that no acknowledged sample is missing or there twice)
            return web.json_response({
                "ids": self.window.request_ids(), "evicted": dict(self.window.evicted),
                "added_total": self.window.added_total,
            })  # fmt: skip

        app.router.add_post("/flush", _flush)
        app.router.add_get("/window/ids", _window_ids)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.admin_host, self.settings.admin_port).start()
        return runner

    async def _cancel_tasks(self) -> None:
        self._stopping.set()
        if self.shift_refit is not None:
            self._tasks.append(self.shift_refit)
            self.shift_refit = None
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []

    async def stop(self) -> None:
        await self._cancel_tasks()
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
        if self._admin is not None:
            await self._admin.cleanup()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.drain()
        if self._redis is not None:
            await self._redis.aclose()

    async def abort(self) -> None:
        """Stop as if the process died: no drain, nothing more acknowledged (tests)."""
        await self._cancel_tasks()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        if self._admin is not None:
            await self._admin.cleanup()
        if self._redis is not None:
            await self._redis.aclose()

    @property
    def admin_port(self) -> int | None:
        if self._admin is None or not self._admin.addresses:
            return None
        return self._admin.addresses[0][1]

    def health(self) -> dict:
        connected = bool(self._nc and self._nc.is_connected)
        r = self.last_result
        return {
            "ready": connected and bool(self._tasks),
            "window": len(self.window),
            "model_version": self.last_version,
            "current_version": self._current.version if self._current else None,
            "last_decision": {"decision": r.decision, "reason": r.reason} if r else None,
            "live_mape": {t: self.drift.mape(t) for t in self.drift.targets},
        }

    # --- consuming ----------------------------------------------------------------------
    def admit(self, data: bytes, *, replay: bool = False) -> str:
        """Decode, validate and offer one sample to the window; returns ADDED or the reason
        it was not added. Counts live outcomes (replayed rejections were counted before)."""
        now = self.clock()
        sample = decode_sample(data)
        if isinstance(sample, str):
            reason = sample
        else:
            reason = check(sample, self.limits, now) or self.window.offer(sample, now)
        if reason == ADDED:
            if replay:
                self.metrics.samples_replayed.inc()
            else:
                self.metrics.samples_received.inc()
            for target in self.drift.observe_sample(sample):
                self.metrics.live_mape.labels(target=target).set(self.drift.mape(target))
                self.metrics.live_samples.labels(target=target).set(self.drift.count(target))
            if self.shift is not None and not replay:
                began = self.shift.observe(sample.predicted_ttft_ms, sample.ttft_ms, sample.ts)
                if began is not None:
                    self._on_shift(began)
        elif not replay:
            self.metrics.samples_rejected.labels(reason=reason).inc()
        return reason

    async def _consume_loop(self) -> None:
        s = self.settings
        while not self._stopping.is_set():
            try:
                msgs = await self._psub.fetch(s.fetch_batch, timeout=s.fetch_timeout_s)
            except TimeoutError:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # disconnects etc.: the client reconnects by itself
                log.warning("fetch failed: %s", e)
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                await self.handle_message(msg)
            self._sync_window_metrics()

    async def handle_message(self, msg: Msg) -> None:
        if not self.tel.enabled:
            await self._handle(msg)
            return
        parent = trace_context.extract(msg.headers)
        attrs = trace_context.messaging_attributes(
            msg.subject, "process", operation_name="process", body_size=len(msg.data)
        )
        with self.tel.span(
            f"process {msg.subject}", kind=SpanKind.CONSUMER, context=parent, attributes=attrs
        ) as span:
            reason = await self._handle(msg)
            span.set_attribute("headroom.sample.outcome", reason)
            if reason == ADDED and parent is not None:
                self._sample_contexts.append(trace_context.span_context(msg.headers))

    async def _handle(self, msg: Msg) -> str:
        reason = self.admit(msg.data)
        try:
            if reason == ADDED or reason in _ACKED_REJECTIONS:
                await msg.ack()
            else:
                log.warning("rejected sample on %s: %s", msg.subject, reason)
                await msg.term()  # invalid: never redelivered, never trained on
        except Exception as e:  # redelivery is harmless: the window de-duplicates
            log.warning("ack failed (%s): %s", reason, e)
        return reason

    def _on_shift(self, began: float) -> None:
        """A workload shift began at ``began`` (live TTFT error jumped): forget the samples
        before it and refit on the recent window now, without waiting for the cadence."""
        dropped = self.window.forget_before(began)
        self.metrics.shifts.inc()
        log.warning("workload shift detected (live TTFT MAPE %.0f%%): %d older samples "
                    "forgotten, refitting", 100 * (self.shift.level_at_shift or 0.0), dropped)  # fmt: skip
        if self.shift_refit is None or self.shift_refit.done():
            self.shift_refit = asyncio.get_running_loop().create_task(self.fit_now(force=True))

    def _sync_window_metrics(self) -> None:
        m = self.metrics
        m.window_size.set(len(self.window))
        m.window_buckets_filled.set(len(self.window.bucket_sizes()))
        for reason, total in self.window.evicted.items():
            delta = total - self._evicted_seen.get(reason, 0)
            if delta:
                m.window_evicted.labels(reason=reason).inc(delta)
        self._evicted_seen = dict(self.window.evicted)

    # --- control ------------------------------------------------------------------------
    async def flush(self) -> dict:
        """Drop the window now; samples stamped before now are refused, also after restart."""
        now = self.clock()
        n = self.window.flush(now)
        await self._redis.set(self.names.trainer_flushed_at, repr(now))
        self._fitted_at_added = self.window.added_total
        self.metrics.flushes.inc()
        self._sync_window_metrics()
        log.warning("window flushed: %d samples dropped", n)
        return {"flushed": n, "not_before": now}

    async def _on_flush(self, msg: Msg) -> None:
        try:
            body = await self.flush()
        except Exception as e:
            body = {"error": str(e)}
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(orjson.dumps(body))

    async def _warm_start(self, path: str) -> None:
        if await current_version(self._redis, self.names) is not None:
            return
        try:
            data = await asyncio.to_thread(Path(path).read_bytes)
            meta = await import_model_file(
                self._redis,
                self.names,
                data,
                origin=path,
                now=self.clock(),
                keep=self.settings.keep_versions,
            )
        except (OSError, SchemaError) as e:
            log.error("warm start from %s failed: %s", path, e)
            return
        await self._announce(meta.version, meta.created_at)
        log.info("warm start: imported %s as %s", path, meta.version)

    async def _announce(self, version: str, created_at: float) -> None:
        ann = ModelAnnouncement(version=version, created_at=created_at)
        await self._nc.publish(self.names.model_announce, ann.encode())
        await self._nc.flush(timeout=2.0)

    # --- training -----------------------------------------------------------------------
    async def _fit_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.interval_s)
            if self._stopping.is_set():
                return
            try:
                await self.fit_now()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.metrics.fits.labels(result="error").inc()
                log.exception("training cycle failed")

    def new_samples(self) -> int:
        return self.window.added_total - self._fitted_at_added

    async def _guard_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.republish_check_s)
            if self._stopping.is_set():
                return
            try:
                await self.ensure_current()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis down: the next check retries
                log.warning("could not check the current model in Redis: %s", e)

    async def ensure_current(self) -> str | None:
        """If Redis has no current model but this trainer knows the one it had (Redis was
        restarted empty or flushed), write it back under the same id, with the version
        counter at least as far, and announce it; returns the version written back."""
        if self._served is None or await current_version(self._redis, self.names) is not None:
            return None
        meta, blobs = self._served
        try:
            await publish_version(
                self._redis, self.names, meta, blobs, keep=self.settings.keep_versions
            )
        except VersionExists:  # the blob survived, only the pointer is gone
            await self._redis.set(self.names.model_current, meta.version)
        number = meta.version.removeprefix("v")
        if number.isdigit():  # ids stay unique: the counter does not restart below it
            await self._redis.set(self.names.model_seq, int(number), nx=True)
        await append_history(self._redis, self.names, {
            "ts": self.clock(), "action": "republish", "version": meta.version,
            "reason": "Redis had no current model",
        })  # fmt: skip
        self.metrics.model_republished.inc()
        log.warning("Redis had lost the current model: wrote %s back; announcing it",
                    meta.version)  # fmt: skip
        await self._announce(meta.version, meta.created_at)
        return meta.version

    async def current_model(self) -> LatencyModel | None:
        """The version ``current`` points at (cached per id); None if none or unloadable.
        A Redis that lost it (restarted empty) gets it back first (:meth:`ensure_current`)."""
        await self.ensure_current()
        version = await current_version(self._redis, self.names)
        if version is None:
            self._current = None
        elif self._current is None or self._current.version != version:
            try:
                meta, blobs = await read_version(self._redis, self.names, version)
                self._current = LatencyModel.from_blobs(meta, blobs)
                self._served = (meta, blobs)
            except SchemaError as e:
                log.error("current model %s cannot be loaded (%s); any candidate wins", version, e)
                self._current = None
        return self._current

    async def fit_now(self, *, force: bool = False) -> str | None:
        """Run a cycle if the window allows; returns the promoted version or None.

        ``force`` ignores ``min_new_samples`` (never ``min_samples``)."""
        async with self._fit_lock:
            s = self.settings
            self.window.expire(self.clock())
            self._sync_window_metrics()
            counts = self.window.counts()
            due, lacking = refit_gate(
                self.new_samples(), counts, min_new_samples=s.min_new_samples,
                min_samples=s.min_samples, targets=self.config.targets, force=force,
            )  # fmt: skip
            if not due:
                if lacking and counts.get("ttft", 0) >= s.min_samples:
                    self.metrics.fits.labels(result="skipped").inc()
                    log.info("cycle skipped: too few samples for %s (%s)", lacking, counts)
                return None
            links = [Link(sc) for sc in self._sample_contexts]
            self._sample_contexts.clear()
            with self.tel.span(
                "trainer.fit",
                links=links,
                attributes={"headroom.trainer.window": len(self.window), "headroom.pool": s.pool},
            ) as span:
                current = await self.current_model()
                entries = self.window.snapshot()  # taken on the loop, arrays built off it
                coverage = self.window.coverage()
                added_at = self.window.added_total
                started = time.perf_counter()
                result = await asyncio.to_thread(
                    cycle_on_entries, entries, current, self.config, s.seed
                )
                self.metrics.fit_seconds.observe(time.perf_counter() - started)
                self._fitted_at_added = added_at
                self.last_result = result
                version = await self._conclude(result, coverage)
                if span is not None:
                    span.set_attributes(_fit_attributes(result, current, version))
                return version

    async def _conclude(self, result: CycleResult, coverage: dict) -> str | None:
        m = self.metrics
        m.candidates.labels(decision=result.decision).inc()
        for key, mt in result.metrics.items():
            if mt.get("mape") is not None:
                m.candidate_mape.labels(target=key).set(mt["mape"])
        record = {
            "ts": self.clock(),
            "action": result.decision,
            "reason": result.reason,
            "current": result.compared_with,
            "holdout": result.holdout,
            "samples": result.samples,
            "candidate_metrics": result.metrics,
            "current_metrics": result.current_metrics,
        }
        if result.decision == REJECT:
            m.fits.labels(result="ok").inc()
            for key in result.worse_keys:
                m.rejections.labels(target=key).inc()
            log.warning("candidate rejected, keeping %s: %s", result.compared_with, result.reason)
            await append_history(self._redis, self.names, record)
            return None
        if result.decision != PROMOTE:
            m.fits.labels(result="skipped").inc()
            log.info("cycle skipped: %s", result.reason)
            return None
        version = await next_version(self._redis, self.names)
        now = self.clock()
        meta, blobs = build_meta(version, now, result, self.config, bucket_coverage=coverage)
        await publish_version(
            self._redis, self.names, meta, blobs, keep=self.settings.keep_versions
        )
        await append_history(self._redis, self.names, {**record, "version": version})
        await self._announce(version, now)
        self._current = LatencyModel.from_blobs(meta, blobs)
        self._served = (meta, blobs)
        self.last_version = version
        m.fits.labels(result="ok").inc()
        m.set_version(version)
        for key, mt in result.metrics.items():
            if mt.get("mape") is not None:
                m.model_mape.labels(target=key).set(mt["mape"])
            if mt.get("coverage") is not None:
                m.model_coverage.labels(target=key).set(mt["coverage"])
        log.info(
            "published model %s (%d samples, %s; %s)",
            version,
            result.samples,
            {k: v.get("mape") for k, v in result.metrics.items()},
            result.reason,
        )
        return version
