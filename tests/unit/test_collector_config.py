"""Pod-list parsing, static discovery, settings and the pure record builders."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.collector.discovery import PodTarget, StaticDiscovery, parse_pod_list
from services.collector.parsers import ParseResult
from services.collector.scraper import error_record, record_from_result
from services.collector.settings import CollectorSettings


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("", []),
        (" , ", []),
        (
            "pod-0=http://127.0.0.1:8001,pod-1=http://127.0.0.1:8002",
            [("pod-0", "http://127.0.0.1:8001"), ("pod-1", "http://127.0.0.1:8002")],
        ),
        (
            "http://10.0.0.1:8000/, http://10.0.0.2:8000",
            [("pod-0", "http://10.0.0.1:8000"), ("pod-1", "http://10.0.0.2:8000")],
        ),
        (
            "a=http://h:1, http://h:2 ,c = https://h:3/base/",
            [("a", "http://h:1"), ("pod-1", "http://h:2"), ("c", "https://h:3/base")],
        ),
        ("http://h:1/?x=y", [("pod-0", "http://h:1/?x=y")]),
    ],
)
def test_parse_pod_list(spec, expected):
    assert parse_pod_list(spec) == [PodTarget(n, u) for n, u in expected]


@pytest.mark.parametrize(
    "spec, match",
    [
        ("a=http://h:1,a=http://h:2", "duplicate"),
        ("a=ftp://h:1", "http"),
        ("a=127.0.0.1:8000", "http"),
        ("=http://h:1", "empty name"),
    ],
)
def test_parse_pod_list_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_pod_list(spec)


async def test_static_discovery():
    d = StaticDiscovery.from_spec("a=http://h:1")
    await d.start()
    assert list(d.targets()) == [PodTarget("a", "http://h:1")]
    await d.stop()


def test_settings_defaults_and_env(monkeypatch):
    for k in ("HEADROOM_POOL", "HEADROOM_NAMESPACE", "HEADROOM_NATS_URL"):
        monkeypatch.delenv(k, raising=False)
    s = CollectorSettings()
    assert (s.scrape_interval_ms, s.scrape_timeout_ms, s.admin_host, s.admin_port, s.engine) == (
        100,
        1000,
        "127.0.0.1",
        9101,
        "vllm",
    )
    monkeypatch.setenv("HEADROOM_COLLECTOR_PODS", "x=http://127.0.0.1:9")
    monkeypatch.setenv("HEADROOM_COLLECTOR_SCRAPE_INTERVAL_MS", "50")
    monkeypatch.setenv("HEADROOM_POOL", "pool-a")
    monkeypatch.setenv("HEADROOM_NAMESPACE", "ns1")
    monkeypatch.setenv("HEADROOM_NATS_URL", "nats://127.0.0.1:4333")
    s = CollectorSettings()
    assert s.pod_targets() == [PodTarget("x", "http://127.0.0.1:9")]
    assert (s.scrape_interval_ms, s.pool, s.namespace, s.nats_url) == (
        50,
        "pool-a",
        "ns1",
        "nats://127.0.0.1:4333",
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"engine": "tgi-nope"}, {"pods": "a=nota-url"}, {"scrape_interval_ms": 0}],
)
def test_settings_rejects(kwargs):
    with pytest.raises(ValidationError):
        CollectorSettings(**kwargs)


def test_settings_metrics_path_normalised():
    assert CollectorSettings(metrics_path="stats").metrics_path == "/stats"


def test_record_builders():
    t = PodTarget("p", "http://h:1")
    res = ParseResult(
        waiting=1, running=2, kv_usage=0.5, prefix_hit_rate=0.25, models=["m"], found=3
    )
    r = record_from_result(t, "vllm", res, 123.0)
    assert (r.name, r.url, r.ready, r.scraped_at, r.models) == (
        "p",
        "http://h:1",
        True,
        123.0,
        ["m"],
    )
    assert (r.waiting, r.running, r.kv_usage, r.prefix_hit_rate, r.error) == (1, 2, 0.5, 0.25, None)
    r.validate()
    e = error_record(t, "vllm", "connect: " + "x" * 1000, 5.0)
    assert (e.ready, e.scraped_at, e.waiting) == (False, 5.0, 0.0)
    assert e.error.startswith("connect: ") and len(e.error) <= 240
    e.validate()
