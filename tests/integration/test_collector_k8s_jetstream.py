"""End to end: Kubernetes discovery (local list/watch server) finds simulated JetStream pods
on distinct loopback IPs sharing one target port; the collector scrapes them, publishes
snapshots on NATS and exports the per-pool autoscaling gauges."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from services.collector.exposition import iter_samples
from services.collector.service import CollectorService
from services.simulator.server import start_pod
from services.simulator.settings import DEFAULT_MODEL
from shared.bus import connect_nats
from tests.integration.k8s_fake_api import FakeKubeApi, make_pod
from tests.integration.test_collector_service import _settings, _subscribe

LABELS = {"app": "jetstream", "pool": "llama3-8b"}
PROMPT = "Tell me a long story about the sea. " * 30


@pytest.fixture
async def nc(isolated):
    c = await connect_nats(isolated["nats_url"], "test-collector-k8s")
    yield c
    await c.close()


async def _admin_metrics(port: int) -> dict[tuple[str, tuple], float]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in iter_samples(text) if s}


async def test_kubernetes_discovered_jetstream_pods(isolated, nc):
    a = await start_pod("js-a", host="127.0.0.2", profile="tpu-v5e-llama3-8b")
    port = int(a.url.rsplit(":", 1)[1])
    b = await start_pod("js-b", host="127.0.0.3", port=port, profile="tpu-v5e-llama3-8b")
    api = FakeKubeApi(namespace="models")
    await api.start()
    api.put_pod(make_pod("js-a", "127.0.0.2", labels=LABELS))
    api.put_pod(make_pod("js-b", "127.0.0.3", labels=LABELS))
    api.put_pod(make_pod("js-c", "127.0.0.4", labels=LABELS, ready=False))  # never scraped
    settings = _settings(
        isolated,
        "",
        engine="jetstream",
        discovery="kubernetes",
        k8s_api_url=api.url,
        k8s_namespace="models",
        k8s_label_selector="app=jetstream,pool=llama3-8b",
        k8s_target_port=port,
    )
    snaps = await _subscribe(nc, isolated)
    svc = CollectorService(settings)
    await svc.start()
    try:
        snap = await snaps.wait_for(lambda p: set(p) == {"js-a", "js-b"} and p["js-a"].ready)
        recs = {p.name: p for p in snap.pods}
        assert recs["js-a"].url == f"http://127.0.0.2:{port}"
        assert recs["js-a"].engine == "jetstream" and recs["js-a"].models == [DEFAULT_MODEL]

        # load on js-a shows as slots used (JetStream exposes no running count)
        body = {"model": DEFAULT_MODEL, "prompt": PROMPT, "max_tokens": 400}
        async with aiohttp.ClientSession() as http:
            reqs = [
                asyncio.create_task(http.post(a.url + "/v1/completions", json=body))
                for _ in range(4)
            ]
            snap = await snaps.wait_for(lambda p: p["js-a"].kv_usage > 0)
            assert {p.name: p for p in snap.pods}["js-b"].kv_usage == 0
            m = await _admin_metrics(settings.admin_port)
            pool = (("pool", "pool-a"),)
            assert m[("headroom_pool_replicas", pool)] == 2
            assert m[("headroom_pool_ready_replicas", pool)] == 2
            assert m[("headroom_pool_slots_used_percentage", pool)] > 0
            assert ("headroom_pool_prefill_backlog_per_replica", pool) in m
            for strategy in ("prefill-backlog", "slots-used", "kv-usage"):
                key = ("headroom_autoscale_recommended_replicas",
                       (("pool", "pool-a"), ("strategy", strategy)))  # fmt: skip
                assert m[key] >= 1
            for t in reqs:
                t.cancel()
            await asyncio.gather(*reqs, return_exceptions=True)

        # js-b starts terminating: it leaves the pool at once
        api.put_pod(make_pod("js-b", "127.0.0.3", labels=LABELS, deleting=True))
        await snaps.wait_for(lambda p: set(p) == {"js-a"})
        reg = svc.metrics.registry
        assert reg.get_sample_value("headroom_collector_parse_ignored_lines_total") == 0
    finally:
        await svc.stop()
        await api.stop()
        await a.stop()
        await b.stop()
