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
``error`` (anything else, including an invalid reply).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import nats.errors
import numpy as np
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from opentelemetry.trace import SpanContext, SpanKind
from prometheus_client import CollectorRegistry, Counter, Histogram

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
    ) -> None:
        self.tel = telemetry or Telemetry.disabled("gateway")
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
            return self._count(BatchResult(reason=REASON_NO_RESPONDERS))
        except TimeoutError:  # nats.errors.TimeoutError is one too
            return self._count(BatchResult(reason=REASON_TIMEOUT))
        except Exception as e:  # connection closed, draining, ...
            log.warning("prediction request failed: %s", e)
            return self._count(BatchResult(reason=REASON_ERROR))
        return self._count(decode_reply(msg.data, len(rows)))

    def _count(self, r: BatchResult) -> BatchResult:
        if self._metrics is not None:
            self._metrics.batches.labels(r.reason or "ok").inc()
        return r
