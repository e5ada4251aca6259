"""The gateway's spans (OpenTelemetry), kept out of the request flow's modules.

Every helper is a no-op, and most are never called, when tracing is off
(``Telemetry.enabled`` is False): the hot path pays one attribute check.

- :func:`plugin_timer` wraps the scheduler's :class:`PluginTimer` hook (the one seam that
  already times every plugin call for the metrics) so each plugin call also becomes a child
  span of the current scheduling span, recorded after the fact from the measured duration.
- :func:`start_pod_call` / :func:`end_pod_call`: the CLIENT span of one HTTP attempt to a
  pod (aiohttp is instrumented by hand: its contrib instrumentation has no release for this
  OpenTelemetry version); its context goes to the pod in ``traceparent``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from services.gateway.scheduling.plugin import Plugin
from services.gateway.scheduling.scheduler import PluginTimer
from shared import trace_context
from shared.telemetry import Telemetry


def plugin_timer(timer: PluginTimer, tel: Telemetry) -> PluginTimer:
    """``timer`` itself when tracing is off; else one that also records a span per call."""
    if not tel.enabled:
        return timer
    tracer = tel.tracer
    observe = timer.observe

    def observe_and_trace(plugin: Plugin, seconds: float) -> None:
        observe(plugin, seconds)
        if not trace.get_current_span().is_recording():
            return  # the request is not sampled (or not traced at all)
        end = time.time_ns()
        span = tracer.start_span(
            f"{plugin.KIND} {plugin.name}",
            start_time=end - int(seconds * 1e9),
            attributes={
                "headroom.plugin.kind": plugin.KIND,
                "headroom.plugin.type": plugin.TYPE,
                "headroom.plugin.name": plugin.name,
            },
        )
        span.end(end_time=end)

    return PluginTimer(observe_and_trace, timer.clock)


def decision_attributes(decision) -> dict[str, object]:
    """Span attributes of a :class:`~services.gateway.gateway.RoutingDecision`."""
    attrs: dict[str, object] = {
        "headroom.routing.path": decision.path,
        "headroom.profile": decision.profile,
        "headroom.candidates": len(decision.ranked),
        "gen_ai.usage.input_tokens": decision.input_tokens,
    }
    if decision.reason:
        attrs["headroom.routing.fallback_reason"] = decision.reason
    if decision.model_version:
        attrs["headroom.model.version"] = decision.model_version
    if decision.slo_ttft_ms is not None:
        attrs["headroom.slo.ttft_ms"] = decision.slo_ttft_ms
    if decision.slo_tpot_ms is not None:
        attrs["headroom.slo.tpot_ms"] = decision.slo_tpot_ms
    if decision.ranked:
        best = decision.ranked[0]
        attrs["headroom.pod"] = best.candidate.name
        if best.prediction is not None:
            attrs["headroom.predicted.ttft_ms"] = best.prediction.ttft_ms
            attrs["headroom.predicted.tpot_ms"] = best.prediction.tpot_ms
        if best.score is not None:
            attrs["headroom.score"] = best.score
    return attrs


def trace_id_hex() -> str | None:
    """The current trace id (32 hex digits), None outside a recording span."""
    sc = trace.get_current_span().get_span_context()
    return f"{sc.trace_id:032x}" if sc.is_valid else None


def start_pod_call(
    tel: Telemetry,
    *,
    url: str,
    pod: str,
    model: str,
    request_id: str,
    attempt: int,
    headers: dict[str, str],
) -> Span | None:
    """Start the CLIENT span of one attempt and inject its context into ``headers``."""
    if not tel.enabled:
        return None
    u = urlsplit(url)
    span = tel.tracer.start_span(
        "POST",
        kind=SpanKind.CLIENT,
        attributes={
            "http.request.method": "POST",
            "url.full": url,
            "server.address": u.hostname or "",
            "server.port": u.port or (443 if u.scheme == "https" else 80),
            "headroom.pod": pod,
            "headroom.request_id": request_id,
            "headroom.attempt": attempt,
            "gen_ai.request.model": model,
        },
    )
    trace_context.inject(headers, trace.set_span_in_context(span))
    return span


def end_pod_call(
    span: Span | None,
    *,
    status: int | None = None,
    error: str | None = None,
    attributes: Mapping[str, object] | None = None,
) -> None:
    """End an attempt's span: the pod's HTTP status, or ``error`` (failure reason)."""
    if span is None:
        return
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if attributes:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    elif status is not None and status >= 400:
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))
    span.end()
