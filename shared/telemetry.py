"""OpenTelemetry set-up shared by every service: one :class:`Telemetry` per service instance.

Configured by the standard ``OTEL_*`` environment variables, read when the service starts
(never at import time):

- ``OTEL_SDK_DISABLED=true`` turns everything off.
- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console`` or ``none``. Unset means ``otlp`` if an
  OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
  is set, else ``none``: tracing is off by default.
- ``OTEL_METRICS_EXPORTER``: ``otlp``, ``console`` or ``none`` (default ``none``: the
  services' metrics are Prometheus ``/metrics``; OTLP metrics are opt-in).
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or the ``_TRACES_``/``_METRICS_`` variants): ``grpc``
  (default) or ``http/protobuf``. Endpoint, headers, timeout, TLS and sampler variables
  (``OTEL_TRACES_SAMPLER``...) are read by the OpenTelemetry SDK itself.
- ``OTEL_SERVICE_NAME`` overrides the service name (default ``headroom-<service>``);
  ``OTEL_RESOURCE_ATTRIBUTES`` adds resource attributes.

When tracing is off, :attr:`Telemetry.enabled` is False, :meth:`Telemetry.span` returns a
shared null context manager and header injection returns its input unchanged, so the hot
paths pay one attribute check. Providers are per instance (not the global ones), so
several services can run in one process (tests) each with its own ``service.name``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Tracer

log = logging.getLogger(__name__)

TRACES_EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
_NULL = contextlib.nullcontext(None)


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """What to export, decided from the ``OTEL_*`` variables (see the module docstring)."""

    traces: str = "none"  # otlp | console | none
    metrics: str = "none"  # otlp | console | none
    traces_protocol: str = "grpc"
    metrics_protocol: str = "grpc"
    service_name: str | None = None  # OTEL_SERVICE_NAME

    @property
    def tracing(self) -> bool:
        return self.traces != "none"


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for n in names:
        v = env.get(n, "").strip()
        if v:
            return v
    return None


def _exporter(value: str | None, default: str, what: str) -> str:
    """The first supported exporter of a comma-separated list (``otlp,console`` -> otlp)."""
    if value is None:
        return default
    for item in (v.strip().lower() for v in value.split(",")):
        if item in TRACES_EXPORTERS:
            return item
        log.warning("unsupported %s exporter %r ignored", what, item)
    return "none"


def _protocol(value: str | None) -> str:
    if value is None:
        return "grpc"
    v = value.strip().lower()
    if v in ("http", "http/json"):
        log.warning("OTLP protocol %r not supported; using http/protobuf", value)
        return "http/protobuf"
    if v not in PROTOCOLS:
        log.warning("unknown OTLP protocol %r; using grpc", value)
        return "grpc"
    return v


def config_from_env(env: Mapping[str, str]) -> TelemetryConfig:
    """Pure: the telemetry configuration the given environment asks for."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TelemetryConfig()
    has_endpoint = _first(env, "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    traces = _exporter(
        _first(env, "OTEL_TRACES_EXPORTER"), "otlp" if has_endpoint else "none", "traces"
    )
    metrics = _exporter(_first(env, "OTEL_METRICS_EXPORTER"), "none", "metrics")
    proto = _first(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
    return TelemetryConfig(
        traces=traces,
        metrics=metrics,
        traces_protocol=_protocol(_first(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or proto),
        metrics_protocol=_protocol(_first(env, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or proto),
        service_name=_first(env, "OTEL_SERVICE_NAME"),
    )


def resource_attributes(
    service: str, *, pool: str | None, pod: str | None, namespace: str | None = None
) -> dict[str, str]:
    """Resource attributes of one service instance (``service.name`` etc.)."""
    attrs = {
        "service.name": f"headroom-{service}",
        "service.namespace": "headroom",
        "headroom.service": service,
    }
    if namespace:
        attrs["headroom.namespace"] = namespace
    if pool:
        attrs["headroom.pool"] = pool
    if pod:
        attrs["k8s.pod.name"] = pod
        attrs["service.instance.id"] = f"{pod}/{os.getpid()}"
    return attrs


class Telemetry:
    """The tracer and meter of one service instance; disabled unless configured.

    ``tracer_provider``/``meter_provider`` are None when off. Use :meth:`span` in code that
    runs per request: it costs nothing when tracing is off.
    """

    def __init__(
        self,
        service: str,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        self.service = service
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.enabled = tracer_provider is not None
        scope = f"headroom.{service}"
        self.tracer: Tracer = (
            tracer_provider.get_tracer(scope) if tracer_provider else trace.NoOpTracer()
        )
        self.meter = (
            meter_provider.get_meter(scope) if meter_provider else otel_metrics.NoOpMeter(scope)
        )

    @classmethod
    def disabled(cls, service: str = "headroom") -> Telemetry:
        return cls(service)

    def span(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = None,
        context: Context | None = None,
        start_time: int | None = None,
    ) -> contextlib.AbstractContextManager[Span | None]:
        """``with tel.span("x") as span:`` a current span, or ``None`` when tracing is off."""
        if not self.enabled:
            return _NULL
        return self.tracer.start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            links=links,
            start_time=start_time,
        )

    def shutdown(self) -> None:
        """Flush and stop the exporters (call once, at process exit)."""
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                try:
                    provider.shutdown()
                except Exception as e:  # an unreachable collector must not block exit
                    log.warning("telemetry shutdown: %s", e)


def _span_exporter(config: TelemetryConfig):
    if config.traces == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.traces_protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _metric_reader(config: TelemetryConfig):
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if config.metrics == "console":
        exporter = ConsoleMetricExporter()
    elif config.metrics_protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    return PeriodicExportingMetricReader(exporter)


def setup_telemetry(
    service: str,
    *,
    pool: str | None = None,
    pod: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    span_exporter: Any = None,
    simple_processor: bool = False,
) -> Telemetry:
    """Build the service's :class:`Telemetry` from ``env`` (default ``os.environ``).

    ``span_exporter`` (tests: an ``InMemorySpanExporter``) turns tracing on regardless of the
    environment; ``simple_processor`` exports each span when it ends (no batching thread).
    ``pod`` defaults to the host name (the pod name in Kubernetes).
    """
    env = os.environ if env is None else env
    config = config_from_env(env)
    if span_exporter is None and not config.tracing and config.metrics == "none":
        return Telemetry(service)

    from opentelemetry.sdk.resources import Resource

    attrs = resource_attributes(
        service,
        pool=pool,
        pod=pod or env.get("HOSTNAME") or socket.gethostname(),
        namespace=namespace,
    )
    if config.service_name:
        attrs["service.name"] = config.service_name
    resource = Resource.create(attrs)

    tracer_provider = None
    if span_exporter is not None or config.tracing:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        exporter = span_exporter or _span_exporter(config)
        processor = (
            SimpleSpanProcessor(exporter) if simple_processor else BatchSpanProcessor(exporter)
        )
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(processor)

    meter_provider = None
    if config.metrics != "none":
        from opentelemetry.sdk.metrics import MeterProvider

        meter_provider = MeterProvider(resource=resource, metric_readers=[_metric_reader(config)])

    log.info(
        "telemetry: traces=%s (%s) metrics=%s service.name=%s",
        "memory" if span_exporter is not None else config.traces,
        config.traces_protocol,
        config.metrics,
        attrs["service.name"],
    )
    return Telemetry(service, tracer_provider=tracer_provider, meter_provider=meter_provider)
