"""W3C trace context in NATS message headers.

nats-py has no OpenTelemetry instrumentation, so the services carry the context themselves:
the sender injects ``traceparent`` (and ``tracestate``) into the message headers, the
receiver extracts it and starts its span as a child. A message that serves several callers
at once (the gateway's coalesced prediction requests) names all of them in
:data:`LINKS_HEADER`, a comma-separated list of ``traceparent`` values; the receiver adds a
span link to each, so every caller's trace finds the span that served it.

Pure functions over plain dicts; callers skip them entirely when tracing is off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
LINKS_HEADER = "headroom-trace-links"
MAX_LINKS = 128  # the SDK's default span link limit

_W3C = TraceContextTextMapPropagator()


def inject(headers: dict[str, str] | None = None, context: Context | None = None) -> dict[str, str]:
    """``headers`` (a new dict if None) with the current (or ``context``'s) span injected."""
    carrier: dict[str, str] = {} if headers is None else headers
    _W3C.inject(carrier, context=context)
    return carrier


def extract(headers: Mapping[str, str] | None) -> Context | None:
    """The remote parent context carried by ``headers``; None if absent or invalid."""
    if not headers or TRACEPARENT not in headers:
        return None
    ctx = _W3C.extract(headers)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def span_context(headers: Mapping[str, str] | None) -> SpanContext | None:
    ctx = extract(headers)
    return None if ctx is None else trace.get_current_span(ctx).get_span_context()


def traceparent(sc: SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def parse_traceparent(value: str) -> SpanContext | None:
    return span_context({TRACEPARENT: value.strip()})


def encode_links(contexts: Iterable[SpanContext]) -> str:
    """The :data:`LINKS_HEADER` value naming ``contexts`` (invalid ones skipped)."""
    return ",".join(traceparent(sc) for sc in contexts if sc.is_valid)


def decode_links(value: str | None, limit: int = MAX_LINKS) -> list[SpanContext]:
    """Span contexts of a :data:`LINKS_HEADER` value (malformed entries skipped)."""
    out: list[SpanContext] = []
    if not value:
        return out
    for part in value.split(","):
        sc = parse_traceparent(part)
        if sc is not None:
            out.append(sc)
            if len(out) >= limit:
                break
    return out


def links_from_headers(headers: Mapping[str, str] | None) -> list[Link]:
    """One link per context in :data:`LINKS_HEADER`, or to ``traceparent`` if absent."""
    if not headers:
        return []
    scs = decode_links(headers.get(LINKS_HEADER))
    if not scs:
        sc = span_context(headers)
        scs = [sc] if sc is not None else []
    return [Link(sc) for sc in scs]


def messaging_attributes(
    subject: str, operation: str, *, operation_name: str, body_size: int | None = None
) -> dict[str, str | int]:
    """OpenTelemetry messaging semantic-convention attributes for a NATS operation."""
    attrs: dict[str, str | int] = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.operation.type": operation,  # send | receive | process
        "messaging.operation.name": operation_name,  # request | publish | respond ...
    }
    if body_size is not None:
        attrs["messaging.message.body.size"] = body_size
    return attrs
