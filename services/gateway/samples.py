"""Publish training samples to JetStream in the background (never delays a response).

Each sample goes to ``names.samples(pool)`` with ``Nats-Msg-Id`` = request id, so a retried
publication is de-duplicated by the stream. Failures are counted and logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext
from opentelemetry.trace import SpanKind

from services.gateway.metrics import GatewayMetrics
from shared import trace_context
from shared.schemas import TrainingSample
from shared.telemetry import Telemetry

log = logging.getLogger(__name__)


class SamplePublisher:
    def __init__(
        self,
        js: JetStreamContext,
        subject: str,
        metrics: GatewayMetrics,
        timeout_s: float = 5.0,
        *,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.tel = telemetry or Telemetry.disabled("gateway")
        self.js = js
        self.subject = subject
        self.metrics = metrics
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task] = set()

    def publish(self, sample: TrainingSample) -> None:
        task = asyncio.get_running_loop().create_task(self._publish(sample))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, sample: TrainingSample) -> None:
        try:
            sample.validate()
            data = sample.encode()
            headers = {"Nats-Msg-Id": sample.request_id}
            if not self.tel.enabled:
                await self.js.publish(self.subject, data, timeout=self.timeout_s, headers=headers)
            else:  # the request's context rides with the sample (the trainer links it)
                attrs = trace_context.messaging_attributes(
                    self.subject, "send", operation_name="publish", body_size=len(data)
                )
                attrs["messaging.message.id"] = sample.request_id
                with self.tel.span(
                    f"publish {self.subject}", kind=SpanKind.PRODUCER, attributes=attrs
                ):
                    trace_context.inject(headers)
                    await self.js.publish(
                        self.subject, data, timeout=self.timeout_s, headers=headers
                    )
        except Exception as e:
            self.metrics.samples_failed.inc()
            log.warning("sample publish failed: %s", e, extra={"request_id": sample.request_id})
        else:
            self.metrics.samples_published.inc()

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout_s: float = 2.0) -> None:
        """Wait (bounded) for publications in flight; cancel what is left."""
        if not self._tasks:
            return
        tasks = list(self._tasks)
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
