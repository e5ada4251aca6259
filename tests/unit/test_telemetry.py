"""shared/telemetry.py, shared/trace_context.py and trace ids in the JSON logs (pure, no I/O)."""

from __future__ import annotations

import logging

import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared import trace_context
from shared.logs import JsonFormatter
from shared.telemetry import Telemetry, TelemetryConfig, config_from_env, setup_telemetry

EP = "http://jaeger:4317"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, TelemetryConfig()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": EP}, TelemetryConfig(traces="otlp")),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": EP}, TelemetryConfig(traces="otlp")),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, TelemetryConfig()),
        ({"OTEL_TRACES_EXPORTER": "console"}, TelemetryConfig(traces="console")),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, TelemetryConfig(traces="otlp")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": EP}, TelemetryConfig()),
        ({"OTEL_TRACES_EXPORTER": "zipkin,console"}, TelemetryConfig(traces="console")),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, TelemetryConfig()),
        (
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": EP},
            TelemetryConfig(),
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": EP, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            TelemetryConfig(
                traces="otlp", traces_protocol="http/protobuf", metrics_protocol="http/protobuf"
            ),
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": EP,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            },
            TelemetryConfig(traces="otlp", metrics_protocol="http/protobuf"),
        ),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, TelemetryConfig(metrics="otlp")),
        ({"OTEL_SERVICE_NAME": "gw-eu"}, TelemetryConfig(service_name="gw-eu")),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"},
            TelemetryConfig(traces="otlp"),
        ),
    ],
)
def test_config_from_env(env, expected):
    assert config_from_env(env) == expected


def test_off_by_default_costs_one_check():
    tel = setup_telemetry("gateway", env={})
    assert not tel.enabled and tel.tracer_provider is None and tel.meter_provider is None
    with tel.span("anything", attributes={"a": 1}) as span:
        assert span is None
    assert tel.span("x") is tel.span("y")  # one shared null context
    tel.shutdown()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_exporters_build_without_a_collector(protocol):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }
    tel = setup_telemetry("predictor", pool="p", env=env)
    assert tel.enabled and tel.meter_provider is None
    tel.tracer_provider.shutdown()  # nothing exported: shutdown must not wait for a collector


def test_resource_names_service_pool_and_pod():
    exporter = InMemorySpanExporter()
    tel = setup_telemetry(
        "predictor",
        pool="blue",
        pod="predictor-7f9",
        namespace="ns1",
        env={},
        span_exporter=exporter,
        simple_processor=True,
    )
    with tel.span("work", kind=SpanKind.SERVER, attributes={"k": "v"}) as span:
        assert span is not None
    (s,) = exporter.get_finished_spans()
    attrs = dict(s.resource.attributes)
    assert attrs["service.name"] == "headroom-predictor"
    assert attrs["headroom.pool"] == "blue"
    assert attrs["k8s.pod.name"] == "predictor-7f9"
    assert attrs["headroom.namespace"] == "ns1"
    assert s.kind == SpanKind.SERVER and s.attributes["k"] == "v"
    assert s.instrumentation_scope.name == "headroom.predictor"


def test_service_name_override():
    exporter = InMemorySpanExporter()
    tel = setup_telemetry(
        "gateway", env={"OTEL_SERVICE_NAME": "edge"}, span_exporter=exporter, simple_processor=True
    )
    with tel.span("x"):
        pass
    assert exporter.get_finished_spans()[0].resource.attributes["service.name"] == "edge"


def _tel(exporter: InMemorySpanExporter, service: str = "gateway") -> Telemetry:
    return setup_telemetry(service, env={}, span_exporter=exporter, simple_processor=True)


def test_nats_headers_carry_the_parent_across_services():
    exporter = InMemorySpanExporter()
    gw, pred = _tel(exporter, "gateway"), _tel(exporter, "predictor")
    with gw.span("predict", kind=SpanKind.CLIENT):
        headers = trace_context.inject({"Nats-Msg-Id": "r1"})
    assert headers["Nats-Msg-Id"] == "r1" and headers["traceparent"].startswith("00-")
    with pred.span("serve", kind=SpanKind.SERVER, context=trace_context.extract(headers)):
        pass
    server, client = exporter.get_finished_spans()[::-1]
    assert server.context.trace_id == client.context.trace_id
    assert server.parent.span_id == client.context.span_id and server.parent.is_remote
    assert client.resource.attributes["service.name"] == "headroom-gateway"
    assert server.resource.attributes["service.name"] == "headroom-predictor"


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"traceparent": "garbage"},
        {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
    ],
)
def test_extract_ignores_missing_or_invalid_context(headers):
    assert trace_context.extract(headers) is None
    assert trace_context.links_from_headers(headers) == []


def test_inject_outside_a_span_adds_nothing():
    assert trace_context.inject() == {}


def _ids(contexts) -> list[tuple[int, int]]:
    return [(sc.trace_id, sc.span_id) for sc in contexts]


def test_links_round_trip_and_skip_garbage():
    exporter = InMemorySpanExporter()
    tel = _tel(exporter)
    contexts = []
    for i in range(3):
        with tel.span(f"caller-{i}") as span:
            contexts.append(span.get_span_context())
    value = trace_context.encode_links(contexts)
    decoded = trace_context.decode_links(value)
    assert _ids(decoded) == _ids(contexts) and all(sc.is_remote for sc in decoded)
    assert _ids(trace_context.decode_links(value + ",nonsense, ")) == _ids(contexts)
    assert _ids(trace_context.decode_links(value, limit=2)) == _ids(contexts[:2])
    assert trace_context.decode_links(None) == []
    links = trace_context.links_from_headers(
        {"traceparent": trace_context.traceparent(contexts[0]), trace_context.LINKS_HEADER: value}
    )
    assert _ids(link.context for link in links) == _ids(contexts)
    single = trace_context.links_from_headers(
        {"traceparent": trace_context.traceparent(contexts[1])}
    )
    assert _ids(link.context for link in single) == _ids(contexts[1:2])


def test_messaging_attributes_follow_semantic_conventions():
    attrs = trace_context.messaging_attributes(
        "ns.predict", "send", operation_name="request", body_size=12
    )
    assert attrs == {
        "messaging.system": "nats",
        "messaging.destination.name": "ns.predict",
        "messaging.operation.type": "send",
        "messaging.operation.name": "request",
        "messaging.message.body.size": 12,
    }


def _log_line(**extra) -> dict:
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("w",), None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return orjson.loads(JsonFormatter("gateway").format(rec))


def test_json_logs_carry_the_current_trace_id():
    assert "trace_id" not in _log_line()
    exporter = InMemorySpanExporter()
    tel = _tel(exporter)
    with tel.span("req") as span:
        line = _log_line(request_id="r1")
        explicit = _log_line(trace_id="abc")
    sc = span.get_span_context()
    assert line["trace_id"] == f"{sc.trace_id:032x}" and line["span_id"] == f"{sc.span_id:016x}"
    assert line["request_id"] == "r1" and line["msg"] == "hello w"
    assert explicit["trace_id"] == "abc"
