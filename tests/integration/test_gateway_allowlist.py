"""A forged pod snapshot on NATS cannot redirect prompts (issue 16, done-means 3): the real
gateway with a pod allowlist (base URLs; or its own Kubernetes watch, the collector's code,
against a list/watch API server in the test) drops a snapshot naming a pod outside it,
counts it, and keeps routing to the admitted pods only; the outside pod never gets a
request."""

from __future__ import annotations

import time

import pytest

from services.simulator.server import start_pod
from shared.schemas import PodRecord, PodSnapshot
from tests.integration.gateway_harness import MODEL, POOL, gateway_stack, metric, wait_for
from tests.integration.k8s_fake_api import FakeKubeApi, make_pod

pytestmark = pytest.mark.timeout(60)
CMPL = "/v1/completions"


def served(pod) -> int:
    """Requests a simulated pod finished (from its own metrics)."""
    total = 0.0
    for line in pod.metrics.render().decode().splitlines():
        if line.startswith("vllm:request_success_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def refused(st) -> float:
    return st.gw.metrics.pods_refused.labels("not_allowed")._value.get()


async def publish(st, pods: list[PodRecord]) -> None:
    snap = PodSnapshot(pool=POOL, ts=time.time(), pods=pods)
    await st.nc.publish(st.names.pod_snapshots(POOL), snap.encode())
    await st.nc.flush()


@pytest.mark.parametrize("with_real", [True, False], ids=["plus-real-pods", "outside-only"])
async def test_snapshot_naming_a_pod_outside_the_allowlist_is_refused(isolated, with_real):
    evil = await start_pod("evil", model=MODEL)  # a listener that must never get a prompt
    try:
        async with gateway_stack(isolated, n_pods=2, allow_own_pods=True) as st:
            await st.snapshot()
            now = time.time()
            # what an attacker on NATS would publish: the real pods overloaded, theirs idle
            forged = [PodRecord(name="evil", url=evil.url, ready=True, scraped_at=now,
                                models=[MODEL])]  # fmt: skip
            if with_real:
                forged += [PodRecord(name=p.name, url=p.url, ready=True, scraped_at=now,
                                     models=[MODEL], waiting=50, running=200, kv_usage=0.99)
                           for p in st.pods]  # fmt: skip
            await publish(st, forged)
            await wait_for(lambda: refused(st) >= 1, what="the refusal counted")
            for i in range(10):
                body = {"model": MODEL, "prompt": f"prompt {i}", "max_tokens": 2}
                status, h, _ = await st.post(CMPL, body)
                assert status == 200 and h["x-headroom-pod"] in ("pod-0", "pod-1"), h
            m = await st.metrics()
            assert metric(m, "headroom_gateway_snapshot_pods_refused_total",
                          reason="not_allowed") == 1  # fmt: skip
            assert metric(m, "headroom_gateway_snapshots_invalid_total",
                          reason="pod_not_allowed") == 1  # fmt: skip
            assert st.gw.view.record("evil") is None
            assert st.gw.view.record("pod-0").waiting == 0  # the forged loads were not applied
        assert served(evil) == 0
    finally:
        await evil.stop()


async def test_allowlist_from_the_gateways_own_kubernetes_watch(isolated):
    api = FakeKubeApi(namespace="models")
    await api.start()
    real = await start_pod("pod-k", model=MODEL)
    outside = await start_pod("pod-x", model=MODEL)
    try:
        port = int(real.url.rsplit(":", 1)[1])
        api.put_pod(make_pod("pod-k", "127.0.0.1", labels={"app": "vllm"}))
        async with gateway_stack(
            isolated, n_pods=0, pod_allow_k8s_label_selector="app=vllm",
            pod_allow_k8s_namespace="models", pod_allow_k8s_port=port,
            pod_allow_k8s_api_url=api.url,
        ) as st:  # fmt: skip
            st.pods.append(real)
            await st.snapshot()  # admitted: the watch sees a pod at this URL
            now = time.time()
            await publish(st, [PodRecord(name=p.name, url=p.url, ready=True, scraped_at=now,
                                         models=[MODEL]) for p in (real, outside)])  # fmt: skip
            await wait_for(lambda: refused(st) >= 1, what="the refusal counted")
            assert st.gw.view.record("pod-x") is None
            status, h, _ = await st.post(CMPL, {"model": MODEL, "prompt": "hi", "max_tokens": 2})
            assert status == 200 and h["x-headroom-pod"] == "pod-k"

            api.delete_pod("pod-k")  # it leaves the watch: snapshots naming it are refused
            await wait_for(lambda: not st.gw._discovery.targets(), what="the deletion seen")
            before = refused(st)
            await publish(st, [PodRecord(name="pod-k", url=real.url, ready=True,
                                         scraped_at=time.time(), models=[MODEL])])  # fmt: skip
            await wait_for(lambda: refused(st) > before, what="the refusal after it left")
            st.pods.clear()  # stopped below
        assert served(outside) == 0
    finally:
        await outside.stop()
        await real.stop()
        await api.stop()
