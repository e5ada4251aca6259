"""The predictor's asyncio shell: NATS queue-group service + model loading from Redis.

A model version is loaded at start (the current one in Redis), when an announcement on
``names.model_announce`` says the current pointer moved (new version or rollback), and
whenever the periodic check finds ``current`` moved (an announcement can be missed). A
version that fails its checksum, schema or probe is refused (metric + log) and remembered;
the last good model keeps serving. The predictor runs one process per replica, so every
replica that is up serves the current version within ``reload_interval_s``.

Predict requests are decoded as they arrive and queued; one batch task predicts everything
queued since its last call in one prediction call (at most ``max_batch_rows`` rows), in a
worker thread when the batch has more than ``inline_max_rows`` rows, so the event loop keeps
answering NATS and ``/health`` while the predictor is saturated. A small request (no more
rows than the model's forest serves: a routing decision over a few pods) that arrives while
nothing is queued or being predicted is answered at once in its own callback: a lone
decision skips the hop to the batch task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from services.predictor.core import Job, ModelSlot, PredictHandler, check_servable
from services.predictor.metrics import PredictorMetrics
from services.predictor.settings import PredictorSettings
from services.predictor.tracing import PredictTracing
from shared.admin import start_admin_server
from shared.bus import check_redis, connect_nats, connect_redis
from shared.model_store import current_version, load_version
from shared.runner import GcPauses
from shared.schemas import ModelAnnouncement, SchemaError
from shared.subjects import Names
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)

_MAX_REFUSED = 64


class PredictorService:
    def __init__(
        self,
        settings: PredictorSettings,
        *,
        metrics: PredictorMetrics | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        tel = telemetry or Telemetry.disabled("predictor")
        self._tracing = PredictTracing(tel, settings.replica_id) if tel.enabled else None
        self._spans: dict[int, object] = {}  # id(job) -> its SERVER span (tracing on)
        self.names = Names(settings.namespace)
        self.metrics = metrics or PredictorMetrics()
        self.slot = ModelSlot()
        self.handler = PredictHandler(
            self.slot,
            self.metrics,
            settings.replica_id,
            inline_max_rows=settings.inline_max_rows,
            prefer=settings.objective,
        )
        self.refused: OrderedDict[str, str] = OrderedDict()  # version -> reason
        self._load_lock = asyncio.Lock()
        self._nc: NATS | None = None
        self._redis = None
        self._subs: list = []
        self._admin: web.AppRunner | None = None
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._pending: deque[Job] = deque()
        self._wake = asyncio.Event()
        self._batch_task: asyncio.Task | None = None
        self._busy = 0  # batches being predicted (batch task and inline answers)
        self._idle = asyncio.Event()
        self._predict_sub = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="predict")
        self._gc_pauses = GcPauses(self.metrics.registry, "headroom_predictor")

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self._gc_pauses.install()
        self._redis = connect_redis(s)
        # refused credentials fail the start; an unreachable Redis is retried by the checks
        await check_redis(self._redis, s.redis_url, f"predictor {s.replica_id}")
        self._nc = await connect_nats(s, f"headroom-predictor-{s.replica_id}")
        self._subs.append(await self._nc.subscribe(self.names.model_announce, cb=self._on_announce))
        await self.check_current()
        self._batch_task = asyncio.create_task(self._batch_loop(), name="predictor-batches")
        self._predict_sub = await self._nc.subscribe(
            self.names.predict,
            queue=self.names.predict_queue,
            cb=self._on_predict,
        )
        await self._nc.flush(timeout=2.0)
        self._admin = await start_admin_server(
            s.admin_host, s.admin_port, self.metrics.registry, self.health
        )
        self._task = asyncio.create_task(self._reload_loop(), name="predictor-reload")
        log.info(
            "predictor %s started (namespace %s, model %s, admin port %s)",
            s.replica_id,
            s.namespace,
            self.slot.version,
            self.admin_port,
        )

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._predict_sub is not None:
            with contextlib.suppress(Exception):
                await self._predict_sub.drain()  # no new requests; received ones are queued
            await self._wait_idle(5.0)  # answer what is queued
        if self._batch_task is not None:
            self._batch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._batch_task
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.drain()
        if self._admin is not None:
            await self._admin.cleanup()
        if self._redis is not None:
            await self._redis.aclose()
        self._executor.shutdown(wait=False)
        self._gc_pauses.remove()

    async def _wait_idle(self, timeout_s: float) -> None:
        if self._pending or self._busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout_s)

    @property
    def admin_port(self) -> int | None:
        if self._admin is None or not self._admin.addresses:
            return None
        return self._admin.addresses[0][1]

    def health(self) -> dict:
        return {
            "ready": bool(self._nc and self._nc.is_connected),
            "model_version": self.slot.version,
            "replica": self.settings.replica_id,
        }

    # --- NATS callbacks -----------------------------------------------------------------
    async def _on_predict(self, msg: Msg) -> None:
        job = self.handler.decode(msg.data, token=msg)
        if self._tracing is not None:
            span = self._tracing.start(msg, job.n_rows)
            if job.error is not None:
                await self._respond(msg, job.error)
                self._tracing.end(span, "bad_request")
                return
            self._spans[id(job)] = span
        elif job.error is not None:
            await self._respond(msg, job.error)
            return
        if not self._pending and not self._busy and not self._backlog() \
                and job.n_rows <= self.handler.small_rows():  # fmt: skip
            # a small request with nothing to batch it with: answer now, without waking the
            # batch task (a lone decision pays no extra hop; requests arriving meanwhile
            # queue for the task). Larger ones always go through the batch task, which
            # predicts together whatever arrived while the previous batch ran.
            await self._serve([job], self.slot.model)
            return
        self._pending.append(job)
        self._idle.clear()
        self.metrics.queued_requests.set(len(self._pending))
        self._wake.set()

    def _backlog(self) -> int:
        """Requests received from NATS but not yet handed to :meth:`_on_predict`."""
        sub = self._predict_sub
        return sub.pending_msgs if sub is not None else 0

    @staticmethod
    async def _respond(msg: Msg, data: bytes) -> None:
        if msg.reply:
            try:
                await msg.respond(data)
            except Exception as e:
                log.warning("could not send predict reply: %s", e)

    def _take(self) -> list[Job]:
        """Everything queued, up to ``max_batch_rows`` rows (at least one request)."""
        jobs: list[Job] = []
        rows = 0
        cap = self.settings.max_batch_rows
        while self._pending and (not jobs or rows + self._pending[0].n_rows <= cap):
            job = self._pending.popleft()
            jobs.append(job)
            rows += job.n_rows
        self.metrics.queued_requests.set(len(self._pending))
        return jobs

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                try:
                    jobs = self._take()
                    model = self.slot.model  # read once: the whole batch uses this version
                    if sum(j.n_rows for j in jobs) > self.handler.inline_max_rows:
                        await self._serve(jobs, model, loop)
                    else:
                        await self._serve(jobs, model)
                except Exception:  # defensive: the loop must survive anything
                    log.exception("predict batch failed")

    async def _serve(self, jobs: list[Job], model, loop=None) -> None:
        """Predict ``jobs`` in one call with ``model`` (in the worker thread when ``loop`` is
        given) and answer each; idle is set when nothing is queued or predicted after it."""
        self._busy += 1
        self._idle.clear()
        try:
            started_ns = time.time_ns() if self._tracing is not None else 0
            if loop is not None:
                replies = await loop.run_in_executor(
                    self._executor, self.handler.run_batch, jobs, model
                )
            else:
                replies = self.handler.run_batch(jobs, model)
            if self._tracing is not None:
                self._trace_batch(jobs, model, started_ns)
            for job, data in zip(jobs, replies, strict=True):
                await self._respond(job.token, data)  # type: ignore[arg-type]
                if self._tracing is not None:
                    span = self._spans.pop(id(job), None)
                    if span is not None:
                        self._tracing.end(span)
        finally:
            self._busy -= 1
            if not self._pending and not self._busy:
                self._idle.set()

    def _trace_batch(self, jobs: list[Job], model, started_ns: int) -> None:
        assert self._tracing is not None
        spans = [sp for j in jobs if (sp := self._spans.get(id(j))) is not None]
        self._tracing.batch(
            spans,  # type: ignore[arg-type]
            model_version=model.version if model is not None else None,
            rows=sum(j.n_rows for j in jobs),
            start_ns=started_ns,
            end_ns=time.time_ns(),
        )

    async def _on_announce(self, msg: Msg) -> None:
        """An announcement means "the current pointer moved": read it from Redis (the one
        authority) rather than trusting the announced id, so a rollback to an older version
        and a stale or reordered announcement are handled alike."""
        try:
            ann = ModelAnnouncement.decode(msg.data)
        except SchemaError as e:
            log.warning("ignoring malformed model announcement: %s", e)
            return
        log.debug("model %s announced", ann.version)
        await self.check_current(source="announce")

    # --- model loading ------------------------------------------------------------------
    async def _reload_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.reload_interval_s)
            if self._stopping.is_set():
                return
            await self.check_current()

    async def check_current(self, *, source: str = "poll") -> None:
        """Load Redis's current version if it differs from the served one."""
        try:
            version = await current_version(self._redis, self.names)
        except Exception as e:
            log.warning("could not read the current model version: %s", e)
            return
        if version is not None and version != self.slot.version:
            await self.load(version, source=source)

    async def load(self, version: str, *, source: str) -> bool:
        """Load and install ``version``; False if it was refused or could not be read."""
        async with self._load_lock:
            if version == self.slot.version or version in self.refused:
                return version == self.slot.version
            try:
                model = await load_version(self._redis, self.names, version)
                check_servable(model, self.settings.objective)
                # its fast inference (forest, probes) is built off the event loop
                await asyncio.to_thread(self.handler.compiled, model)
            except SchemaError as e:
                self.refused[version] = e.reason
                while len(self.refused) > _MAX_REFUSED:
                    self.refused.popitem(last=False)
                self.metrics.model_loads.labels(result="refused").inc()
                self.metrics.model_refusals.labels(reason=e.reason).inc()
                log.error(
                    "refused model %s (%s: %s); keeping %s",
                    version,
                    e.reason,
                    e,
                    self.slot.version,
                )
                return False
            except Exception as e:  # Redis unavailable etc.: retried by the next check
                self.metrics.model_loads.labels(result="error").inc()
                log.warning("could not load model %s: %s", version, e)
                return False
            old = self.slot.swap(model)
            self.metrics.model_loads.labels(result="ok").inc()
            self.metrics.set_version(version)
            log.info(
                "serving model %s (was %s, via %s)",
                version,
                old.version if old else None,
                source,
            )
            return True
