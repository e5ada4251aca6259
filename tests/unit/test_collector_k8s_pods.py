"""Which pods are scrape targets (pure), the pod set's event handling, and the settings that
select Kubernetes discovery."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.collector.discovery import PodTarget
from services.collector.k8s_discovery import PodSet, is_ready, pod_target
from services.collector.settings import CollectorSettings
from tests.integration.k8s_fake_api import make_pod


@pytest.mark.parametrize(
    "pod, ready",
    [
        (make_pod("a"), True),
        (make_pod("a", ready=False), False),
        (make_pod("a", None), False),  # no IP yet
        (make_pod("a", phase="Pending"), False),
        (make_pod("a", phase="Succeeded"), False),
        (make_pod("a", deleting=True), False),  # terminating, still Ready: out at once
        ({"metadata": {"name": "a"}, "status": {"phase": "Running", "podIP": "1.2.3.4"}}, False),
        ({}, False),
    ],
)
def test_is_ready(pod, ready):
    assert is_ready(pod) is ready


def test_pod_target_urls():
    assert pod_target(make_pod("a", "10.1.2.3"), 8000) == PodTarget("a", "http://10.1.2.3:8000")
    assert pod_target(make_pod("a", "fd00::1"), 8000).url == "http://[fd00::1]:8000"
    t = pod_target(make_pod("a", "10.1.2.3"), 8000, "https", metrics_port=9100)
    assert t == PodTarget("a", "https://10.1.2.3:8000", "https://10.1.2.3:9100/metrics")
    assert pod_target(make_pod("a", "10.1.2.3"), 8000, metrics_port=8000).metrics_url is None
    assert pod_target(make_pod("a", ready=False), 8000) is None


def test_pod_set_events():
    s = PodSet(8000)
    s.replace([make_pod("b", "10.0.0.2"), make_pod("a", "10.0.0.1"), make_pod("c", None)])
    assert [t.name for t in s.targets()] == ["a", "b"]
    assert s.apply("MODIFIED", make_pod("a", "10.0.0.1")) is False  # no change
    assert s.apply("MODIFIED", make_pod("a", "10.0.0.9")) is True  # new IP
    assert s.targets()[0].url == "http://10.0.0.9:8000"
    assert s.apply("MODIFIED", make_pod("b", "10.0.0.2", deleting=True)) is True
    assert s.apply("DELETED", make_pod("b", "10.0.0.2")) is False  # already gone
    assert s.apply("ADDED", make_pod("c", "10.0.0.3")) is True
    assert s.apply("DELETED", make_pod("a", "10.0.0.9")) is True
    assert [t.name for t in s.targets()] == ["c"]
    assert s.apply("ADDED", {"metadata": {}}) is False


def test_kubernetes_discovery_settings():
    s = CollectorSettings(discovery="kubernetes", k8s_label_selector="app=vllm", engine="sglang")
    assert s.k8s_target_port == 8000 and s.k8s_namespace == "" and s.k8s_metrics_port == 0
    with pytest.raises(ValidationError, match="LABEL_SELECTOR"):
        CollectorSettings(discovery="kubernetes")
    with pytest.raises(ValidationError):
        CollectorSettings(discovery="consul")
    with pytest.raises(ValidationError, match="must not exceed"):
        CollectorSettings(autoscale_min_replicas=5, autoscale_max_replicas=2)


def test_kubernetes_settings_from_env(monkeypatch):
    monkeypatch.setenv("HEADROOM_COLLECTOR_DISCOVERY", "kubernetes")
    monkeypatch.setenv("HEADROOM_COLLECTOR_K8S_LABEL_SELECTOR", "app=jetstream")
    monkeypatch.setenv("HEADROOM_COLLECTOR_K8S_METRICS_PORT", "9100")
    monkeypatch.setenv("HEADROOM_COLLECTOR_ENGINE", "jetstream")
    s = CollectorSettings()
    assert (s.discovery, s.k8s_label_selector, s.k8s_metrics_port) == (
        "kubernetes",
        "app=jetstream",
        9100,
    )
