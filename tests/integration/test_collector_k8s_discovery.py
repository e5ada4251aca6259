"""Kubernetes discovery against a local API server speaking the list/watch protocol."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from services.collector.k8s_discovery import KubernetesDiscovery
from tests.integration.k8s_fake_api import FakeKubeApi, make_pod

SEL = "app=vllm,pool=llama"
LABELS = {"app": "vllm", "pool": "llama"}


async def eventually(cond: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for: {what}")


def names(d: KubernetesDiscovery) -> list[str]:
    return [t.name for t in d.targets()]


@pytest.fixture
async def api():
    a = FakeKubeApi(namespace="models")
    await a.start()
    yield a
    await a.stop()


@pytest.fixture
async def make_discovery(api):
    made: list[KubernetesDiscovery] = []

    async def make(**kw) -> KubernetesDiscovery:
        d = KubernetesDiscovery(
            kw.pop("selector", SEL),
            namespace="models",
            port=8000,
            api_url=api.url,
            backoff_s=0.05,
            max_backoff_s=0.2,
            **kw,
        )
        made.append(d)
        await d.start()
        return d

    yield make
    for d in made:
        await d.stop()


async def test_initial_list_keeps_only_ready_matching_pods_with_an_ip(api, make_discovery):
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS))
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS, ready=False))
    api.put_pod(make_pod("c", None, labels=LABELS, phase="Pending", ready=False))
    api.put_pod(make_pod("d", "10.0.0.4", labels={"app": "vllm", "pool": "other"}))
    api.put_pod(make_pod("e", "10.0.0.5", labels=LABELS, deleting=True))
    api.put_pod(make_pod("f", "fd00::6", labels=LABELS))
    d = await make_discovery()
    assert d.synced.is_set()
    assert [(t.name, t.url) for t in d.targets()] == [
        ("a", "http://10.0.0.1:8000"),
        ("f", "http://[fd00::6]:8000"),
    ]
    assert api.requests[0]["labelSelector"] == SEL
    assert d.stats.lists == 1


async def test_watch_events_update_the_pool(api, make_discovery):
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS))
    d = await make_discovery()
    await eventually(lambda: api.watches == 1 and len(api.watchers) == 1, "watch open")
    watch_q = api.requests[-1]
    assert watch_q["watch"].lower() == watch_q["allowWatchBookmarks"].lower() == "true"
    assert watch_q["resourceVersion"] == str(api.rv)

    # a new pod becomes a target only once it is Ready with an IP
    api.put_pod(make_pod("b", None, labels=LABELS, phase="Pending", ready=False))
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS, ready=False))
    await asyncio.sleep(0.1)
    assert names(d) == ["a"]
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS))
    await eventually(lambda: names(d) == ["a", "b"], "b ready")

    # terminating: leaves at the first event carrying deletionTimestamp (still Ready)
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS, deleting=True))
    await eventually(lambda: names(d) == ["b"], "a terminating")
    api.delete_pod("a")

    # readiness lost, then back
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS, ready=False))
    await eventually(lambda: names(d) == [], "b not ready")
    api.put_pod(make_pod("b", "10.0.0.3", labels=LABELS))
    await eventually(lambda: [t.url for t in d.targets()] == ["http://10.0.0.3:8000"], "b back")

    # relabelled out of the pool: the selector watch delivers DELETED
    api.put_pod(make_pod("b", "10.0.0.3", labels={"app": "vllm", "pool": "other"}))
    await eventually(lambda: names(d) == [], "b relabelled")
    assert d.stats.lists == 1 and d.stats.watches == 1
    assert d.resource_version == str(api.rv)


async def test_watch_restart_resumes_from_last_version_without_relist(api, make_discovery):
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS))
    d = await make_discovery()
    await eventually(lambda: len(api.watchers) == 1, "watch open")
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS))
    await eventually(lambda: names(d) == ["a", "b"], "b added")
    seen_rv = d.resource_version

    api.close_watches()  # server ends the stream (its timeout, a restart)
    api.delete_pod("a")  # happens before the client re-watches: replayed from history
    await eventually(lambda: api.watches >= 2, "re-watch")
    await eventually(lambda: names(d) == ["b"], "missed delete replayed")
    rewatch = [q for q in api.requests if "watch" in q][1]
    assert rewatch["resourceVersion"] == seen_rv
    assert d.stats.lists == 1 and api.lists == 1


async def test_bookmarks_advance_the_version(api, make_discovery):
    d = await make_discovery()
    await eventually(lambda: len(api.watchers) == 1, "watch open")
    api.bookmark()
    await eventually(lambda: d.resource_version == str(api.rv), "bookmark seen")
    assert names(d) == [] and d.stats.events == 0


@pytest.mark.parametrize("gone_http", [False, True], ids=["error-event", "http-410"])
async def test_expired_resource_version_relists(api, make_discovery, gone_http):
    api.gone_http = gone_http
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS))
    api.put_pod(make_pod("b", "10.0.0.2", labels=LABELS))
    d = await make_discovery()
    await eventually(lambda: len(api.watchers) == 1, "watch open")
    assert names(d) == ["a", "b"]

    # while the client is away: a is deleted, c appears, and history is compacted
    api.close_watches()
    api.delete_pod("a")
    api.put_pod(make_pod("c", "10.0.0.3", labels=LABELS))
    api.compact()
    await eventually(lambda: d.stats.expired >= 1, "410 seen")
    await eventually(lambda: names(d) == ["b", "c"], "relisted")
    assert api.lists >= 2 and d.stats.errors == 0
    # and watching continues from the new list's version
    await eventually(lambda: len(api.watchers) == 1, "watching again")
    api.put_pod(make_pod("d", "10.0.0.4", labels=LABELS))
    await eventually(lambda: names(d) == ["b", "c", "d"], "events after relist")


async def test_api_errors_keep_the_pool_and_retry(api, make_discovery):
    api.put_pod(make_pod("a", "10.0.0.1", labels=LABELS))
    api.fail = [500, 503]  # the first list fails twice, then works
    d = await make_discovery()
    await eventually(lambda: names(d) == ["a"], "listed after retries")
    assert d.stats.errors == 2

    await eventually(lambda: len(api.watchers) == 1, "watch open")
    api.fail = [500]  # the re-watch fails: pods stay, then list + watch again
    api.close_watches()
    await eventually(lambda: d.stats.errors == 3, "error counted")
    assert names(d) == ["a"]
    await eventually(lambda: d.stats.lists == 2 and len(api.watchers) == 1, "recovered")


async def test_start_returns_without_api_server():
    d = KubernetesDiscovery(
        SEL, namespace="models", api_url="http://127.0.0.1:9", backoff_s=0.05, sync_timeout_s=0.3
    )
    await d.start()
    try:
        assert names(d) == [] and not d.synced.is_set()
        await eventually(lambda: d.stats.errors >= 1, "connect error counted")
    finally:
        await d.stop()


def test_needs_a_selector():
    with pytest.raises(ValueError, match="label selector"):
        KubernetesDiscovery("")
