"""The trainer's asyncio shell: JetStream consumer -> window -> periodic fit -> Redis + announce.

Each sample is acknowledged only after it is in the window (or, if malformed, terminated
after it is counted), so a crash never loses a sample the window did not see. Fitting runs
in a worker thread; the consumer keeps draining the stream meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiohttp import web
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from services.trainer.fitting import build_meta, fit_entries, missing_targets
from services.trainer.metrics import TrainerMetrics
from services.trainer.replay import acked_upto, replay_history
from services.trainer.settings import TrainerSettings
from services.trainer.window import SampleWindow
from shared.admin import start_admin_server
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import next_version, publish_version
from shared.schemas import ModelAnnouncement, SchemaError, TrainingSample
from shared.subjects import Names

log = logging.getLogger(__name__)


class TrainerService:
    def __init__(
        self,
        settings: TrainerSettings,
        *,
        metrics: TrainerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.names = Names(settings.namespace)
        self.metrics = metrics or TrainerMetrics()
        self.window = SampleWindow(settings.window_size, settings.dedup_size)
        self.clock = clock
        self.last_version: str | None = None
        self._fitted_at_added = 0  # window.added_total at the last successful fit
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
        self._nc = await connect_nats(s.nats_url, "headroom-trainer")
        js = self._nc.jetstream()
        await ensure_samples_stream(js, self.names)
        self._psub = await js.pull_subscribe(
            self.names.samples_wildcard,
            durable=self.names.trainer_durable,
            stream=self.names.samples_stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=60.0,
                max_ack_pending=max(4 * s.fetch_batch, 1024),
            ),
        )
        if s.replay_on_start:
            upto = await acked_upto(js, self.names)
            replayed = await replay_history(
                js,
                self.names,
                self.window,
                upto_seq=upto,
                batch=s.fetch_batch,
                fetch_timeout_s=s.fetch_timeout_s,
            )
            self.metrics.samples_replayed.inc(replayed)
            self.metrics.window_size.set(len(self.window))
            self._fitted_at_added = self.window.added_total  # the stored model saw these
        self._redis = connect_redis(s.redis_url)
        self._admin = await start_admin_server(
            s.admin_host, s.admin_port, self.metrics.registry, self.health
        )
        self._tasks = [
            asyncio.create_task(self._consume_loop(), name="trainer-consume"),
            asyncio.create_task(self._fit_loop(), name="trainer-fit"),
        ]
        log.info("trainer started (namespace %s, admin port %s)", s.namespace, self.admin_port)

    async def stop(self) -> None:
        self._stopping.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
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

    @property
    def admin_port(self) -> int | None:
        if self._admin is None or not self._admin.addresses:
            return None
        return self._admin.addresses[0][1]

    def health(self) -> dict:
        connected = bool(self._nc and self._nc.is_connected)
        return {
            "ready": connected and bool(self._tasks),
            "window": len(self.window),
            "model_version": self.last_version,
        }

    # --- consuming ----------------------------------------------------------------------
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

    async def handle_message(self, msg: Msg) -> None:
        try:
            sample = TrainingSample.decode(msg.data)
        except SchemaError as e:
            self.metrics.samples_rejected.labels(reason=e.reason).inc()
            log.warning("rejected sample on %s: %s", msg.subject, e)
            with contextlib.suppress(Exception):
                await msg.term()
            return
        if self.window.add(sample):
            self.metrics.samples_received.inc()
            self.metrics.window_size.set(len(self.window))
        else:
            self.metrics.samples_rejected.labels(reason="duplicate").inc()
        try:
            await msg.ack()
        except Exception as e:  # redelivery is harmless: the window de-duplicates
            log.warning("ack failed for %s: %s", sample.request_id, e)

    # --- fitting ------------------------------------------------------------------------
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
                log.exception("fit cycle failed")

    def new_samples(self) -> int:
        return self.window.added_total - self._fitted_at_added

    async def fit_now(self, *, force: bool = False) -> str | None:
        """Fit and publish a version if the window allows; returns the version or None.

        ``force`` ignores ``min_new_samples`` (never ``min_samples``)."""
        async with self._fit_lock:
            s = self.settings
            if not force and self.new_samples() < s.min_new_samples:
                return None
            counts = self.window.counts()
            lacking = missing_targets(counts, s.min_samples)
            if lacking:
                if counts.get("ttft", 0) >= s.min_samples:
                    self.metrics.fits.labels(result="skipped").inc()
                    log.info("fit skipped: too few samples for %s (%s)", lacking, counts)
                return None
            entries = self.window.snapshot()  # taken on the loop, arrays built off it
            added_at = self.window.added_total
            n = len(entries)
            started = time.perf_counter()
            try:
                fitted = await asyncio.to_thread(fit_entries, entries, rounds=s.rounds, seed=s.seed)
            except Exception:
                self.metrics.fits.labels(result="error").inc()
                raise
            self.metrics.fit_seconds.observe(time.perf_counter() - started)
            try:
                version = await next_version(self._redis, self.names)
                meta, blobs = build_meta(version, self.clock(), n, fitted)
                await publish_version(self._redis, self.names, meta, blobs, keep=s.keep_versions)
                ann = ModelAnnouncement(version=version, created_at=meta.created_at)
                await self._nc.publish(self.names.model_announce, ann.encode())
                await self._nc.flush(timeout=2.0)
            except Exception:
                self.metrics.fits.labels(result="error").inc()
                raise
            self._fitted_at_added = added_at
            self.last_version = version
            self.metrics.fits.labels(result="ok").inc()
            self.metrics.set_version(version)
            for name, f in fitted.items():
                if f.mape is not None:
                    self.metrics.model_mape.labels(target=name).set(f.mape)
            log.info(
                "published model %s (%d samples, %s)",
                version,
                n,
                {k: f.mape for k, f in fitted.items()},
            )
            return version
