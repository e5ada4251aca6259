"""Publish training samples to JetStream in the background (never delays a response).

Each sample goes to ``names.samples(pool)`` as its own JetStream message with
``Nats-Msg-Id`` = request id, so a retried publication is de-duplicated by the stream.
Samples are handed over in batches: :meth:`SamplePublisher.publish` encodes the sample and
buffers it; the buffer is published after ``linger_s`` (or at once when it holds
``max_batch`` samples), all of it in one write to the NATS connection. Each message carries
its own reply subject under one inbox of this publisher, so JetStream's acknowledgements
come back to a single subscription: a sample counts as published when its ack arrives, and
as failed when the stream answers with an error, nobody listens (no stream: NATS's "no
responders" status) or no ack comes within ``timeout_s``. Failures are counted and logged,
never raised. This replaces one task, one request/reply future and one socket write per
sample (the gateway's largest per-request cost after the proxying itself:
docs/benchmarks.md "Hot path").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time

import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from services.gateway.metrics import GatewayMetrics
from shared import trace_context
from shared.schemas import TrainingSample
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)


class SamplePublisher:
    def __init__(
        self,
        nc: NATS,
        subject: str,
        metrics: GatewayMetrics,
        timeout_s: float = 5.0,
        *,
        linger_s: float = 0.05,
        max_batch: int = 256,
        telemetry: Telemetry | None = None,
        max_pending: int = 20_000,
    ) -> None:
        """``max_pending``: samples buffered or awaiting their ack at most (while NATS is
        unreachable they pile up until their timeout); past it new ones are dropped and
        counted as failed, so an outage cannot grow the gateway's memory without bound."""
        self.tel = telemetry or Telemetry.disabled("gateway")
        self.nc = nc
        self.subject = subject
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.linger_s = linger_s
        self.max_batch = max(1, max_batch)
        self.max_pending = max(1, max_pending)
        self._queued = 0  # samples buffered or in a batch being published (not yet waiting)
        self._inbox = ""
        self._sub = None
        self._seq = itertools.count()
        self._buffer: list[tuple[str, str, bytes, dict[str, str], object]] = []
        self._timer: asyncio.TimerHandle | None = None
        # token -> (request id, deadline, span): published, not yet acknowledged
        self._waiting: dict[str, tuple[str, float, object]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Subscribe to this publisher's ack inbox (before the first sample)."""
        self._inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(self._inbox + ".*", cb=self._on_ack)

    # --- producing ------------------------------------------------------------------------
    def publish(self, sample: TrainingSample) -> None:
        """Validate, encode and buffer one sample (synchronous; never raises)."""
        if self._queued + len(self._waiting) >= self.max_pending:
            self._failed(sample.request_id, f"sample dropped: {self.max_pending} awaiting acks")
            return
        try:
            sample.validate()
            data = sample.encode()
        except Exception as e:
            self._failed(sample.request_id, f"invalid sample: {e}")
            return
        headers = {"Nats-Msg-Id": sample.request_id}
        span = None
        if self.tel.enabled:  # the request's context rides with the sample (the trainer links it)
            attrs = trace_context.messaging_attributes(
                self.subject, "send", operation_name="publish", body_size=len(data)
            )
            attrs["messaging.message.id"] = sample.request_id
            span = self.tel.tracer.start_span(
                f"publish {self.subject}", kind=SpanKind.PRODUCER, attributes=attrs
            )
            trace_context.inject(headers, trace.set_span_in_context(span))
        token = str(next(self._seq))
        self._buffer.append((token, sample.request_id, data, headers, span))
        self._queued += 1
        if len(self._buffer) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger_s, self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _send(self, batch) -> None:
        """Publish ``batch`` (the messages go out together in the connection's next write)."""
        deadline = time.monotonic() + self.timeout_s
        for i, (token, request_id, data, headers, span) in enumerate(batch):
            self._waiting[token] = (request_id, deadline, span)
            self._queued -= 1
            try:
                await self.nc.publish(
                    self.subject, data, reply=f"{self._inbox}.{token}", headers=headers
                )
            except Exception as e:  # connection closed or draining: the rest fails too
                self._queued -= len(batch) - i - 1
                for t, rid, _, _, sp in batch[i:]:
                    self._waiting.pop(t, None)
                    self._failed(rid, f"sample publish failed: {e}", sp)
                return
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self.timeout_s, self._sweep)

    # --- acknowledgements ------------------------------------------------------------------
    async def _on_ack(self, msg: Msg) -> None:
        token = msg.subject.rpartition(".")[2]
        entry = self._waiting.pop(token, None)
        if entry is None:
            return  # already counted as timed out
        request_id, _, span = entry
        hdr = msg.headers or {}
        status = hdr.get("Status")
        if status:
            why = "no stream captures the subject" if status == "503" else f"status {status}"
            self._failed(request_id, f"sample publish failed: {why}", span)
            return
        try:
            ack = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            self._failed(request_id, "sample publish failed: unreadable ack", span)
            return
        if not isinstance(ack, dict) or ack.get("error"):
            err = ack.get("error") if isinstance(ack, dict) else ack
            self._failed(request_id, f"sample publish failed: {err}", span)
            return
        self.metrics.samples_published.inc()
        _end(span, None)

    def _sweep(self) -> None:
        """Count publications whose ack did not come within the timeout as failed."""
        self._sweeper = None
        now = time.monotonic()
        late = [t for t, (_, deadline, _) in self._waiting.items() if deadline <= now]
        for t in late:
            request_id, _, span = self._waiting.pop(t)
            self._failed(
                request_id, f"sample publish failed: no ack within {self.timeout_s:g} s", span
            )
        if self._waiting:
            nxt = min(d for _, d, _ in self._waiting.values())
            self._sweeper = asyncio.get_running_loop().call_later(max(nxt - now, 0.0), self._sweep)

    def _failed(self, request_id: str, message: str, span=None) -> None:
        self.metrics.samples_failed.inc()
        log.warning("%s", message, extra={"request_id": request_id})
        _end(span, "error")

    # --- state and shutdown ------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Samples buffered, being published or awaiting their ack."""
        return len(self._buffer) + len(self._waiting) + len(self._flushing)

    async def drain(self, timeout_s: float = 2.0) -> None:
        """Publish what is buffered and wait (bounded) for the acks; what is still
        unacknowledged then is counted as failed."""
        self._flush()
        deadline = time.monotonic() + timeout_s
        while (self._flushing or self._waiting) and time.monotonic() < deadline:
            if self._flushing:
                await asyncio.wait(
                    list(self._flushing), timeout=max(deadline - time.monotonic(), 0)
                )
            else:
                await asyncio.sleep(0.005)
        for task in list(self._flushing):
            task.cancel()
        for t in list(self._waiting):
            request_id, _, span = self._waiting.pop(t)
            self._failed(request_id, "sample publish failed: no ack before shutdown", span)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None


def _end(span, error: str | None) -> None:
    if span is None:
        return
    if error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))
    span.end()
