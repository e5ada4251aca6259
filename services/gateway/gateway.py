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
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from services.gateway.errors import GatewayError
from services.gateway.metrics import GatewayMetrics
from services.gateway.openai_request import ParsedRequest
from services.gateway.predictor_client import PredictorClient
from services.gateway.prompt import prompt_tokens
from services.gateway.samples import SamplePublisher
from services.gateway.scheduling.fallback import composite_scores
from services.gateway.scheduling.picker import Prediction, rank
from services.gateway.scheduling.pod_view import Candidate, PodView
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import build_candidate_rows
from services.gateway.settings import GatewaySettings
from shared.bus import connect_nats, ensure_samples_stream
from shared.schemas import PodSnapshot, SchemaError
from shared.subjects import Names

log = logging.getLogger(__name__)

# prompts longer than this (characters) are tokenized off the event loop
_INLINE_TOKENIZE_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class RoutedPod:
    candidate: Candidate
    row: list[float]  # the exact feature row built for this pod
    prefix_score: float
    prediction: Prediction | None


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    ranked: list[RoutedPod]  # best first
    path: str  # predicted | fallback
    reason: str | None  # fallback reason
    model_version: str | None
    input_tokens: int
    hashes: list[int]


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.names = Names(settings.namespace)
        self.rng = rng or random.Random()
        self.clock = clock
        self.metrics = GatewayMetrics()
        self.view = PodView(stale_after_s=settings.stale_after_s)
        self.index = PrefixIndex(settings.prefix_block_tokens, settings.prefix_index_blocks)
        self.nc: NATS | None = None
        self.session: aiohttp.ClientSession | None = None
        self.predictor: PredictorClient | None = None
        self.samples: SamplePublisher | None = None
        self.pod_timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=settings.pod_connect_timeout_s,
            sock_read=settings.pod_read_timeout_s,
        )

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self.nc = await connect_nats(s.nats_url, f"gateway-{s.pool}")
        js = self.nc.jetstream()
        await ensure_samples_stream(js, self.names)
        self.predictor = PredictorClient(self.nc, self.names.predict, s.predict_timeout_ms / 1000)
        self.samples = SamplePublisher(
            js, self.names.samples(s.pool), self.metrics, s.sample_publish_timeout_s
        )
        await self.nc.subscribe(self.names.pod_snapshots(s.pool), cb=self._on_snapshot_msg)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            auto_decompress=False,
        )
        log.info("gateway started (namespace=%s pool=%s)", s.namespace, s.pool)

    async def stop(self) -> None:
        if self.samples is not None:
            await self.samples.drain()
        if self.session is not None:
            await self.session.close()
        if self.nc is not None and not self.nc.is_closed:
            try:
                await self.nc.drain()
            except Exception as e:  # already closing
                log.debug("nats drain: %s", e)
                await self.nc.close()

    @property
    def nats_connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

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
        self.view.apply_snapshot(snap)
        self.index.retain(p.name for p in snap.pods)
        self.metrics.snapshots.inc()
        self.update_pod_gauges()

    def update_pod_gauges(self) -> None:
        counts = self.view.counts(self.clock())
        self.metrics.pods.labels("ready").set(counts.ready)
        self.metrics.pods.labels("not_ready").set(counts.not_ready)
        self.metrics.pods.labels("stale").set(counts.stale)

    # --- routing ------------------------------------------------------------------------
    async def route(self, req: ParsedRequest) -> RoutingDecision:
        """Rank the candidate pods for ``req``. Raises GatewayError 404/503."""
        now = self.clock()
        cands = self.view.candidates(req.model, now)
        if not cands:
            raise self._no_candidate_error(req.model, now)
        if sum(len(t) for t in req.texts) > _INLINE_TOKENIZE_CHARS:
            tokens = await asyncio.to_thread(prompt_tokens, req.texts)
        else:
            tokens = prompt_tokens(req.texts)
        hashes = self.index.hashes(tokens)
        cr = build_candidate_rows(cands, len(tokens), hashes, self.index)

        assert self.predictor is not None, "gateway not started"
        t0 = time.perf_counter()
        outcome = await self.predictor.predict(cr.rows)
        self.metrics.predict_seconds.observe(time.perf_counter() - t0)

        preds = outcome.predictions
        if preds is not None:
            order = rank(self.rng, predictions=preds)
            path, reason = "predicted", None
        else:
            order = rank(self.rng, composite=composite_scores([c.load for c in cands],
                                                              cr.prefix_scores))  # fmt: skip
            path, reason = "fallback", outcome.reason
        self.metrics.routing.labels(path, reason or "ok").inc()
        ranked = [
            RoutedPod(cands[i], cr.rows[i], cr.prefix_scores[i], preds[i] if preds else None)
            for i in order
        ]
        return RoutingDecision(
            ranked, path, reason, outcome.model_version if preds else None, len(tokens), hashes
        )

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
