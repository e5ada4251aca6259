"""Decision-explanation headers (services/gateway/explain.py) and the gateway's plugin spans
(services/gateway/tracing.py), pure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.gateway import explain
from services.gateway.scheduling.plugin import Plugin
from services.gateway.scheduling.scheduler import PluginTimer
from services.gateway.tracing import end_pod_call, plugin_timer, start_pod_call
from shared.telemetry import Telemetry, setup_telemetry


@dataclass
class P:
    ttft_ms: float
    tpot_ms: float


@dataclass
class C:
    name: str


@dataclass
class R:
    candidate: C
    prefix_score: float
    prediction: P | None
    score: float | None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), (" Yes ", True), ("0", False), ("", False), ("no", False)],
)
def test_wants_debug(value, expected):
    assert explain.wants_debug({explain.DEBUG_HEADER: value}) is expected
    assert explain.wants_debug({}) is False


def test_decision_headers_always_name_pod_path_and_predictions():
    h = explain.decision_headers(
        "r1",
        "pod-1",
        path="predicted",
        profile="headroom",
        model_version="v3",
        prediction=P(123.456, 7.891),
        trace_id="ab" * 16,
    )
    assert h == {
        "x-request-id": "r1",
        "x-headroom-pod": "pod-1",
        "x-headroom-routing": "predicted",
        "x-headroom-profile": "headroom",
        "x-headroom-model-version": "v3",
        "x-headroom-predicted-ttft-ms": "123.5",
        "x-headroom-predicted-tpot-ms": "7.9",
        "x-headroom-trace-id": "ab" * 16,
    }
    fb = explain.decision_headers("r2", "pod-0", path="fallback", reason="timeout")
    assert fb["x-headroom-fallback-reason"] == "timeout"
    assert "x-headroom-predicted-ttft-ms" not in fb and "x-headroom-trace-id" not in fb


def test_candidates_best_first_with_scores_and_predictions():
    ranked = [
        R(C("pod-1"), 0.5, P(100.0, 8.0), 0.91234),
        R(C("pod-0"), 0.0, None, None),  # filtered out, fallback: no score, no prediction
    ]
    h = explain.debug_headers(ranked, {"slo": "met", "why": "bad\nvalue"})
    assert h["x-headroom-candidates"] == (
        "pod-1;score=0.9123;ttft_ms=100.0;tpot_ms=8.0;prefix=0.5, pod-0;prefix=0"
    )
    assert h["x-headroom-notes"] == "slo=met; why=bad?value"
    assert "x-headroom-notes" not in explain.debug_headers(ranked, {})


def test_notes_header_is_bounded():
    assert len(explain.notes_header({"k": "x" * 10_000})) == explain.MAX_NOTES_CHARS


class _Scorer(Plugin):
    TYPE = "kv-cache-scorer"
    KIND = "scorer"


def test_plugin_timer_is_unchanged_when_tracing_is_off():
    timer = PluginTimer(lambda p, s: None)
    assert plugin_timer(timer, Telemetry.disabled()) is timer
    headers: dict[str, str] = {}
    span = start_pod_call(
        Telemetry.disabled(),
        url="http://x:1/v1",
        pod="p",
        model="m",
        request_id="r",
        attempt=0,
        headers=headers,
    )
    assert span is None and headers == {}
    end_pod_call(None, status=200)


def test_plugin_calls_become_child_spans_with_the_measured_duration():
    exporter = InMemorySpanExporter()
    tel = setup_telemetry("gateway", env={}, span_exporter=exporter, simple_processor=True)
    observed = []
    timer = plugin_timer(PluginTimer(lambda p, s: observed.append((p.name, s))), tel)
    plugin = _Scorer("kv", {})
    with tel.span("gateway.schedule") as parent:
        timer.observe(plugin, 0.002)
    assert observed == [("kv", 0.002)]
    child, sched = exporter.get_finished_spans()
    assert child.name == "scorer kv" and child.parent.span_id == parent.get_span_context().span_id
    assert child.end_time - child.start_time == 2_000_000
    assert child.attributes["headroom.plugin.type"] == "kv-cache-scorer"
    assert sched.name == "gateway.schedule"


def test_pod_call_span_injects_its_context_and_records_the_outcome():
    exporter = InMemorySpanExporter()
    tel = setup_telemetry("gateway", env={}, span_exporter=exporter, simple_processor=True)
    headers = {"x-request-id": "r1"}
    ok = start_pod_call(
        tel,
        url="http://10.0.0.5:8001/v1/completions",
        pod="pod-1",
        model="m",
        request_id="r1",
        attempt=0,
        headers=headers,
    )
    end_pod_call(ok, status=200, attributes={"gen_ai.usage.output_tokens": 5, "x": None})
    bad = start_pod_call(
        tel, url="http://h/v1", pod="pod-2", model="m", request_id="r1", attempt=1, headers={}
    )
    end_pod_call(bad, error="connect")
    s_ok, s_bad = exporter.get_finished_spans()
    assert headers["traceparent"].split("-")[2] == f"{s_ok.context.span_id:016x}"
    assert (
        s_ok.attributes["server.address"] == "10.0.0.5" and s_ok.attributes["server.port"] == 8001
    )
    assert s_ok.attributes["http.response.status_code"] == 200
    assert s_ok.attributes["gen_ai.usage.output_tokens"] == 5 and "x" not in s_ok.attributes
    assert s_bad.status.is_ok is False and s_bad.attributes["error.type"] == "connect"
