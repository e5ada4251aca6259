"""Ask the predictors (NATS request-reply) for TTFT/TPOT predictions of the candidate rows.

Concurrent calls are coalesced (services/gateway/coalescer.py) into few requests in the
binary format of shared/wire.py; replies are accepted in that format or as JSON
``PredictReply``. ``wire="json"`` sends JSON ``PredictRequest`` messages instead (older
predictors; one request per batch, the rows of all its calls).

Requests carry reply subjects under one inbox of this client (``<inbox>.<token>``), and one
subscription to it resolves each waiting request's future: no wrapper future and
``wait_for`` per request as in nats-py's ``request()`` (two event-loop hops less on the way
back; measured ~50 us less round trip and CPU per call, docs/benchmarks.md "Hot path").

Never raises: a failed call comes back as a fallback reason, and the request is routed by
the composite score instead. Reasons: ``no_model`` (predictor answered not_ready),
``timeout`` (the call's deadline passed), ``no_responders`` (no predictor subscribed),
``nats_disconnected`` (NATS is down: answered at once rather than after the deadline),
``error`` (anything else, including an invalid reply), ``circuit_open`` (not sent: the
predictors are known to be down).

A circuit breaker (services/gateway/breaker.py) watches the outcomes: after a few
consecutive timeouts or errors (frozen predictors, an unreachable bus) calls are skipped at
once instead of each waiting out its deadline (absent predictors cost no wait: NATS answers
"no responders" within a round trip, so that outcome does not open it; neither does a NATS
disconnect, which is answered at once), and a probe (one real call, sent in the background
so no request waits for it) finds out when the predictors answer again.
``headroom_gateway_predictor_circuit`` holds the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import nats.errors
import numpy as np
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from opentelemetry.trace import SpanContext, SpanKind
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.gateway.breaker import STATES, BreakerConfig, CircuitBreaker
from services.gateway.coalescer import BatchResult, Coalescer, CoalescerConfig
from services.gateway.scheduling.prediction import Prediction
from shared import trace_context, wire
from shared.features import FEATURES
from shared.schemas import (
    PREDICT_NOT_READY,
    PREDICT_OK,
    PredictReply,
    PredictRequest,
    SchemaError,
)
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)

REASON_NO_MODEL = "no_model"
REASON_TIMEOUT = "timeout"
REASON_NO_RESPONDERS = "no_responders"
REASON_ERROR = "error"
REASON_CIRCUIT_OPEN = "circuit_open"
# outcomes that open the breaker: the call cost its deadline (or failed). "no responders"
# is not one: NATS says so within a round trip, and a predictor that subscribes again is
# used by the very next call.
_FAILURES = frozenset({REASON_TIMEOUT, REASON_ERROR})
REASON_DISCONNECTED = "nats_disconnected"  # NATS is down: fall back at once, no deadline waited


@dataclass(frozen=True, slots=True)
class PredictOutcome:
    predictions: list[Prediction] | None
    model_version: str | None = None
    reason: str | None = None  # fallback reason when predictions is None
    replica: str | None = None


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.batches = Counter(
            "headroom_gateway_predict_batches",
            "Prediction requests sent to the predictors (coalesced batches), by result",
            ["result"],
            registry=registry,
        )
        self.batch_calls = Histogram(
            "headroom_gateway_predict_batch_calls",
            "Routing decisions coalesced into one prediction request",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=registry,
        )
        self.circuit = Gauge(
            "headroom_gateway_predictor_circuit",
            "Predictor circuit breaker: 1 for the current state (closed|open|half_open)",
            ["state"],
            registry=registry,
        )
        self.circuit_transitions = Counter(
            "headroom_gateway_predictor_circuit_transitions",
            "Predictor circuit breaker state changes, by the state entered",
            ["state"],
            registry=registry,
        )
        self.skipped = Counter(
            "headroom_gateway_predict_skipped",
            "Prediction calls not sent because the predictor circuit was open",
            registry=registry,
        )
        self.probes = Counter(
            "headroom_gateway_predict_probes",
            "Background probe calls of the half-open predictor circuit, by result",
            ["result"],
            registry=registry,
        )
        for state in STATES:
            self.circuit.labels(state).set(1.0 if state == "closed" else 0.0)
            self.circuit_transitions.labels(state)


def decode_reply(data: bytes, n_rows: int) -> BatchResult:
    """A predictor reply (binary or JSON) for a request of ``n_rows`` rows."""
    try:
        if wire.is_wire(data):
            r = wire.decode_reply(data)
            status, version, replica, err = r.status, r.model_version, r.replica, r.error
            ttft, tpot = r.ttft_ms, r.tpot_ms
        else:
            j = PredictReply.decode(data)
            status, version, replica, err = j.status, j.model_version, j.replica, j.error
            ttft, tpot = np.asarray(j.ttft_ms), np.asarray(j.tpot_ms)
    except SchemaError as e:
        log.warning("invalid prediction reply: %s", e)
        return BatchResult(reason=REASON_ERROR)
    if status == PREDICT_NOT_READY:
        return BatchResult(reason=REASON_NO_MODEL, replica=replica)
    if status != PREDICT_OK or len(ttft) != n_rows:
        log.warning("prediction reply unusable: status=%s error=%s", status, err)
        return BatchResult(reason=REASON_ERROR, replica=replica)
    return BatchResult(ttft, tpot, version, None, replica)


class PredictorClient:
    def __init__(
        self,
        nc: NATS,
        subject: str,
        timeout_s: float,
        *,
        coalescer: CoalescerConfig | None = None,
        wire_format: Literal["binary", "json"] = "binary",
        registry: CollectorRegistry | None = None,
        telemetry: Telemetry | None = None,
        breaker: BreakerConfig | None = None,
        clock=time.monotonic,
    ) -> None:
        self.tel = telemetry or Telemetry.disabled("gateway")
        self.breaker = CircuitBreaker(breaker)
        self.clock = clock
        self._probe: asyncio.Task | None = None
        self.nc = nc
        self.subject = subject
        self.timeout_s = timeout_s
        self.wire_format = wire_format
        self.coalescer = Coalescer(self._send, coalescer, keeps_deadline=True)
        self._metrics = _Metrics(registry) if registry is not None else None
        self._inbox = ""  # the reply inbox, subscribed on first use
        self._sub = None
        self._subscribing: asyncio.Lock | None = None
        self._seq = itertools.count()
        self._waiting: dict[str, asyncio.Future] = {}  # token -> the request's reply

    async def _subscribe(self) -> None:
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._sub is None:
                inbox = self.nc.new_inbox()
                self._sub = await self.nc.subscribe(inbox + ".*", cb=self._on_reply)
                self._inbox = inbox

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject.rpartition(".")[2], None)
        if future is not None and not future.done():
            future.set_result(msg)

    async def _request(self, payload: bytes, timeout_s: float, headers) -> Msg:
        """One request-reply on this client's inbox, all of it (publishing included) within
        ``timeout_s``. Raises TimeoutError, NoRespondersError (NATS's 503 status reply) or
        the connection's errors."""
        token = str(next(self._seq))
        future = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        try:
            async with asyncio.timeout(timeout_s):
                if self._sub is None:
                    await self._subscribe()
                await self.nc.publish(
                    self.subject, payload, reply=f"{self._inbox}.{token}", headers=headers
                )
                msg = await future
        finally:
            self._waiting.pop(token, None)
        if msg.headers and msg.headers.get("Status") == "503":
            raise nats.errors.NoRespondersError
        return msg

    async def close(self) -> None:
        """Wait for the batches in flight, then drop the reply subscription."""
        if self._probe is not None:
            with contextlib.suppress(BaseException):
                await self._probe
        await self.coalescer.close()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def predict(
        self, rows: Sequence[Sequence[float]] | np.ndarray, timeout_s: float | None = None
    ) -> PredictOutcome:
        """Predictions for one decision's rows; ``timeout_s`` overrides the client's deadline."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        arr = np.asarray(rows, dtype=np.float32)
        if arr.size == 0:
            arr = arr.reshape(0, len(FEATURES))
        if arr.ndim != 2 or arr.shape[1] != len(FEATURES):
            log.warning("predict called with rows of shape %s", arr.shape)
            return PredictOutcome(None, reason=REASON_ERROR)
        verdict = self.breaker.allow(self.clock())
        if verdict != "call":
            if verdict == "probe":
                self._start_probe(arr)
            if self._metrics is not None:
                self._metrics.skipped.inc()
            return PredictOutcome(None, reason=REASON_CIRCUIT_OPEN)
        if self.tel.enabled:
            r = await self._traced_submit(arr, timeout)
        else:
            r = await self.coalescer.submit(arr, timeout)
        if r.ttft_ms is None or r.tpot_ms is None:
            return PredictOutcome(None, reason=r.reason or REASON_ERROR, replica=r.replica)
        preds = [
            Prediction(a, b) for a, b in zip(r.ttft_ms.tolist(), r.tpot_ms.tolist(), strict=True)
        ]
        return PredictOutcome(preds, model_version=r.model_version, replica=r.replica)

    async def _traced_submit(self, arr: np.ndarray, timeout_s: float) -> BatchResult:
        """The call as a CLIENT span; its context travels in the NATS request's headers
        (with the other callers' when the coalescer batches it with theirs)."""
        attrs = trace_context.messaging_attributes(self.subject, "send", operation_name="request")
        attrs["headroom.predict.rows"] = len(arr)
        with self.tel.span(f"send {self.subject}", kind=SpanKind.CLIENT, attributes=attrs) as span:
            r = await self.coalescer.submit(arr, timeout_s, span.get_span_context())
            if r.reason is not None:
                span.set_attribute("headroom.routing.fallback_reason", r.reason)
            if r.model_version is not None:
                span.set_attribute("headroom.model.version", r.model_version)
            if r.replica is not None:
                span.set_attribute("headroom.predictor.replica", r.replica)
            return r

    async def _send(
        self,
        rows: np.ndarray,
        segments: list[int],
        timeout_s: float,
        traces: list[SpanContext] | None = None,
    ) -> BatchResult:
        """The coalescer's transport: one request, counted and seen by the breaker."""
        return self._count(await self._send_once(rows, segments, timeout_s, traces))

    async def _send_once(
        self,
        rows: np.ndarray,
        segments: list[int],
        timeout_s: float,
        traces: list[SpanContext] | None = None,
    ) -> BatchResult:
        headers = None
        if traces:
            headers = {trace_context.TRACEPARENT: trace_context.traceparent(traces[0])}
            if len(traces) > 1:
                headers[trace_context.LINKS_HEADER] = trace_context.encode_links(traces)
        if self.wire_format == "json":
            payload = PredictRequest(rows=rows.astype(np.float64).tolist()).encode()
        else:
            payload = wire.encode_request(rows, segments if len(segments) > 1 else None)
        if self._metrics is not None:
            self._metrics.batch_calls.observe(len(segments))
        if not self.nc.is_connected:
            return self._count(BatchResult(reason=REASON_DISCONNECTED))
        try:
            msg = await self._request(payload, timeout_s, headers)
        except nats.errors.NoRespondersError:
            return BatchResult(reason=REASON_NO_RESPONDERS)
        except TimeoutError:  # nats.errors.TimeoutError is one too
            return BatchResult(reason=REASON_TIMEOUT)
        except Exception as e:  # connection closed, draining, ...
            log.warning("prediction request failed: %s", e)
            return BatchResult(reason=REASON_ERROR)
        return decode_reply(msg.data, len(rows))

    def _count(self, r: BatchResult) -> BatchResult:
        if self._metrics is not None:
            self._metrics.batches.labels(r.reason or "ok").inc()
        self._observe(r, probe=False)
        return r

    # --- circuit breaker --------------------------------------------------------------------
    def _observe(self, r: BatchResult, *, probe: bool) -> None:
        changed = self.breaker.record(r.reason not in _FAILURES, self.clock(), probe=probe)
        if changed is None:
            return
        level = logging.INFO if changed == "closed" else logging.WARNING
        log.log(level, "predictor circuit %s (last result: %s; next probe after %.1f s)",
                changed, r.reason or "ok", self.breaker.open_for_s)  # fmt: skip
        if self._metrics is not None:
            for state in STATES:
                self._metrics.circuit.labels(state).set(1.0 if state == changed else 0.0)
            self._metrics.circuit_transitions.labels(changed).inc()

    def _start_probe(self, rows: np.ndarray) -> None:
        """Send one real call in the background; its outcome decides the breaker."""
        self._probe = asyncio.get_running_loop().create_task(self._run_probe(rows.copy()))

    async def _run_probe(self, rows: np.ndarray) -> None:
        r = BatchResult(reason=REASON_ERROR)
        try:
            r = await self._send_once(rows, [0], self.timeout_s)
        finally:  # cancelled or failed: still an outcome, so the breaker never sticks
            if self._metrics is not None:
                self._metrics.probes.labels(r.reason or "ok").inc()
            self._observe(r, probe=True)
