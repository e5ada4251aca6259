"""The predictor's spans: one SERVER span per predict request, continuing the gateway's trace
from the W3C context in the NATS message headers, and one span per inference batch.

A request the gateway coalesced from several routing decisions names every caller in
``headroom-trace-links`` (shared/trace_context.py): its SERVER span is a child of the first
caller and carries a span link to each, so every caller's trace reaches it. A batch serves
several requests with one inference call: its span is a child of the first request's SERVER
span and links the others.

Only used when tracing is on (the service checks ``Telemetry.enabled`` first).
"""

from __future__ import annotations

from collections.abc import Sequence

from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from shared import trace_context
from shared.telemetry import Telemetry


class PredictTracing:
    def __init__(self, tel: Telemetry, replica: str) -> None:
        self.tracer = tel.tracer
        self.replica = replica

    def start(self, msg: Msg, n_rows: int) -> Span:
        headers = msg.headers
        links = (
            trace_context.links_from_headers(headers)
            if headers and trace_context.LINKS_HEADER in headers
            else None
        )
        attrs = trace_context.messaging_attributes(
            msg.subject, "process", operation_name="respond", body_size=len(msg.data)
        )
        attrs["headroom.predictor.replica"] = self.replica
        attrs["headroom.predict.rows"] = n_rows
        if links:
            attrs["headroom.predict.callers"] = len(links)
        return self.tracer.start_span(
            f"process {msg.subject}",
            context=trace_context.extract(headers),
            kind=SpanKind.SERVER,
            attributes=attrs,
            links=links,
        )

    def batch(
        self,
        spans: Sequence[Span],
        *,
        model_version: str | None,
        rows: int,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """Record one inference call (after the fact) and tag every request it served."""
        if not spans:
            return
        parent = trace.set_span_in_context(spans[0])
        s = self.tracer.start_span(
            "predictor.inference",
            context=parent,
            start_time=start_ns,
            links=[Link(sp.get_span_context()) for sp in spans[1:]],
            attributes={
                "headroom.predict.batch_requests": len(spans),
                "headroom.predict.rows": rows,
                "headroom.model.version": model_version or "",
            },
        )
        s.end(end_time=end_ns)
        for sp in spans:
            sp.set_attribute("headroom.predict.batch_requests", len(spans))
            if model_version is not None:
                sp.set_attribute("headroom.model.version", model_version)
            else:
                sp.set_attribute("headroom.predict.status", "not_ready")

    @staticmethod
    def end(span: Span, error: str | None = None) -> None:
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()
