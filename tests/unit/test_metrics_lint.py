"""Metric names of every service follow the Prometheus conventions, checked on the text
exposition format (what /metrics serves) parsed with prometheus-client's parser.

:func:`lint_exposition` is also run on the live gateway's /metrics by
tests/integration/test_tracing_gateway.py.
"""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.collector.metrics import CollectorMetrics
from services.gateway.metrics import GatewayMetrics
from services.predictor.metrics import PredictorMetrics
from services.simulator.engine import Engine
from services.simulator.metrics import PodMetrics
from services.simulator.profiles import PROFILES
from services.trainer.metrics import TrainerMetrics

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
OURS = re.compile(r"^(headroom|inference_objective)_[a-z][a-z0-9_]*[a-z0-9]$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# model-server names we reproduce verbatim (REFERENCE section 4; http_requests_total is
# vLLM's API server's, from prometheus-fastapi-instrumentator): valid, not ours to rename
FOREIGN = ("vllm:", "jetstream_", "sglang:", "tgi_", "http_requests")
NON_BASE_UNITS = ("_ms", "_milliseconds", "_microseconds", "_us", "_minutes", "_hours", "_percent")
TIME_WORDS = ("duration", "latency", "seconds", "_time")


def lint_family(name: str, mtype: str, doc: str, samples: list) -> list[str]:
    """Convention violations of one metric family (empty if none)."""
    problems: list[str] = []
    if not NAME.match(name):
        problems.append(f"{name}: invalid metric name")
    if not doc.strip():
        problems.append(f"{name}: no HELP text")
    for s in samples:
        for label in s.labels:
            if not LABEL.match(label) or label.startswith("__"):
                problems.append(f"{name}: invalid label name {label!r}")
    if name.startswith(FOREIGN):
        return problems
    if not OURS.match(name):
        problems.append(f"{name}: not snake_case under headroom_/inference_objective_")
    if mtype == "counter":
        if any(not s.name.endswith(("_total", "_created")) for s in samples):
            problems.append(f"{name}: counter samples must end in _total")
    elif name.endswith("_total"):
        problems.append(f"{name}: only counters end in _total")
    if any(name.endswith(u) or f"{u}_" in name for u in NON_BASE_UNITS):
        problems.append(f"{name}: use base units (seconds, bytes, ratios)")
    if mtype == "histogram" and any(w in name for w in TIME_WORDS):
        if not name.endswith("_seconds"):
            problems.append(f"{name}: a duration histogram must end in _seconds")
    if "seconds" in name and not name.endswith("_seconds"):
        problems.append(f"{name}: the unit goes last (_seconds)")
    if name.endswith("_info"):
        if mtype not in ("gauge", "info"):
            problems.append(f"{name}: _info metrics are gauges")
        if any(s.value != 1 for s in samples):
            problems.append(f"{name}: _info samples must be 1")
    return problems


def lint_exposition(text: str) -> tuple[set[str], list[str]]:
    """(family names, violations) of a Prometheus text exposition."""
    names: set[str] = set()
    problems: list[str] = []
    for fam in text_string_to_metric_families(text):
        if fam.name.endswith("_created") and fam.type == "gauge":
            continue  # prometheus-client's creation timestamps of counters and histograms
        if fam.name in names:
            problems.append(f"{fam.name}: exposed twice")
        names.add(fam.name)
        problems += lint_family(fam.name, fam.type, fam.documentation, fam.samples)
    return names, problems


def _gateway() -> CollectorRegistry:
    m = GatewayMetrics()
    m.requests.labels("/v1/chat/completions", "200").inc()
    m.routing.labels("predicted", "ok").inc()
    m.ttft.labels("m").observe(0.1)
    return m.registry


def _predictor() -> CollectorRegistry:
    m = PredictorMetrics()
    m.requests.labels("ok").inc()
    m.set_version("v3")
    return m.registry


def _trainer() -> CollectorRegistry:
    m = TrainerMetrics()
    m.fits.labels("ok").inc()
    m.model_mape.labels("ttft").set(0.1)
    m.set_version("v1")
    return m.registry


def _collector() -> CollectorRegistry:
    m = CollectorMetrics()
    m.scrape_duration.labels("pod-0").observe(0.01)
    m.staleness.labels("pod-0").set(0.1)
    m.scrape_errors.labels("pod-0", "timeout").inc()
    return m.registry


def _simulator(profile: str) -> bytes:
    return PodMetrics(Engine(PROFILES[profile], 0), "m").render()


REGISTRIES = {
    "gateway": _gateway,
    "predictor": _predictor,
    "trainer": _trainer,
    "collector": _collector,
}


def _exposition(service: str) -> str:
    if service.startswith("simulator:"):
        return _simulator(service.split(":", 1)[1]).decode()
    return generate_latest(REGISTRIES[service]()).decode()


SERVICES = [*REGISTRIES, *(f"simulator:{p}" for p in sorted(PROFILES))]


@pytest.mark.parametrize("service", SERVICES)
def test_metric_names_follow_prometheus_conventions(service):
    names, problems = lint_exposition(_exposition(service))
    assert names, f"{service} exposes no metrics"
    assert not problems, "\n".join(problems)


def test_no_two_services_expose_the_same_name():
    seen: dict[str, str] = {}
    for service in REGISTRIES:
        names, _ = lint_exposition(_exposition(service))
        for n in names:
            assert n not in seen, f"{n} exposed by {seen.get(n)} and {service}"
            seen[n] = service


def test_key_metrics_exist():
    exposed = {s: lint_exposition(_exposition(s))[0] for s in REGISTRIES}
    assert "headroom_collector_pod_staleness_seconds" in exposed["collector"]
    assert "headroom_collector_scrape_duration_seconds" in exposed["collector"]
    assert {"headroom_trainer_window_size", "headroom_trainer_model_mape"} <= exposed["trainer"]
    assert "headroom_predictor_model_info" in exposed["predictor"]
    assert "headroom_gateway_scheduler_plugin_duration_seconds" in exposed["gateway"]


@pytest.mark.parametrize(
    ("name", "mtype", "samples_named", "expected"),
    [
        ("headroom_x_seconds", "histogram", [], None),
        ("headroom_x_latency", "histogram", [], "must end in _seconds"),
        ("headroom_x_latency_ms", "gauge", [], "base units"),
        ("headroom_x_total", "gauge", [], "only counters"),
        ("headroomX", "gauge", [], "snake_case"),
        ("headroom_x_seconds_sum_thing", "gauge", [], "unit goes last"),
        ("vllm:kv_cache_usage_perc", "gauge", [], None),
        ("headroom_x_info", "counter", ["headroom_x_info_total"], "_info metrics are gauges"),
        ("headroom_x", "counter", ["headroom_x"], "must end in _total"),
    ],
)
def test_lint_rules(name, mtype, samples_named, expected):
    from prometheus_client.samples import Sample

    samples = [Sample(n, {}, 1.0) for n in samples_named]
    problems = lint_family(name, mtype, "help", samples)
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems
