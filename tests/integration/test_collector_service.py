"""The collector service end to end in-process: real HTTP pods on 127.0.0.1, real NATS
(isolated namespace), the admin server's /health and /metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import pytest

from services.collector.service import CollectorService
from services.collector.settings import CollectorSettings
from shared.bus import connect_nats
from shared.embedded import free_port
from shared.schemas import PodRecord, PodSnapshot
from tests.integration.test_collector_scraper import FakePod
from tests.unit.test_collector_parsers import MODEL, vllm_page

WAIT_S = 10.0


class Snapshots:
    """Subscribes to the snapshot subject and waits for a snapshot matching a predicate."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[PodSnapshot] = asyncio.Queue()
        self.count = 0

    async def handler(self, msg) -> None:
        self.count += 1
        await self.queue.put(PodSnapshot.decode(msg.data))

    async def wait_for(self, pred: Callable[[dict[str, PodRecord]], bool]) -> PodSnapshot:
        deadline = time.monotonic() + WAIT_S
        last = None
        while (left := deadline - time.monotonic()) > 0:
            try:
                snap = await asyncio.wait_for(self.queue.get(), timeout=left)
            except TimeoutError:
                break
            last = snap
            if pred({p.name: p for p in snap.pods}):
                return snap
        raise AssertionError(f"no matching snapshot within {WAIT_S}s; last: {last}")


def _settings(isolated, pods: str, **kw) -> CollectorSettings:
    return CollectorSettings(
        nats_url=isolated["nats_url"],
        namespace=isolated["namespace"],
        pool="pool-a",
        pods=pods,
        scrape_interval_ms=50,
        scrape_timeout_ms=kw.pop("scrape_timeout_ms", 1000),
        admin_port=free_port(),
        **kw,
    )


@pytest.fixture
async def nc(isolated):
    c = await connect_nats(isolated["nats_url"], "test-collector")
    yield c
    await c.close()


async def _subscribe(nc, isolated) -> Snapshots:
    snaps = Snapshots()
    await nc.subscribe(isolated["names"].pod_snapshots("pool-a"), cb=snaps.handler)
    await nc.flush()
    return snaps


async def test_two_pods_then_one_goes_away(isolated, nc):
    pod0, pod1 = await FakePod().start(), await FakePod().start()
    pod0.page = vllm_page(waiting=3, running=5, kv=0.4, hits=50, queries=100)
    pod1.page = vllm_page(waiting=0, running=2, kv=0.1, hits=0, queries=0, engines=2)
    snaps = await _subscribe(nc, isolated)
    svc = CollectorService(_settings(isolated, f"pod-0={pod0.url},{pod1.url}"))
    await svc.start()
    try:
        snap = await snaps.wait_for(lambda p: p.keys() == {"pod-0", "pod-1"})
        assert snap.pool == "pool-a"
        p0, p1 = (snap.pods[0], snap.pods[1])
        assert (p0.name, p0.url, p0.ready, p0.error) == ("pod-0", pod0.url, True, None)
        assert (p0.waiting, p0.running, p0.kv_usage, p0.prefix_hit_rate) == (3, 5, 0.4, 0.5)
        assert p0.models == [MODEL] and p0.engine == "vllm"
        assert p0.scraped_at == pytest.approx(time.time(), abs=30)
        assert (p1.name, p1.url, p1.ready) == ("pod-1", pod1.url, True)
        assert (p1.waiting, p1.running, p1.kv_usage, p1.prefix_hit_rate) == (0, 4, 0.1, 0)

        # values follow the pods
        pod0.page = vllm_page(waiting=11, running=5, kv=0.9)
        await snaps.wait_for(lambda p: p["pod-0"].waiting == 11 and p["pod-0"].kv_usage == 0.9)

        # health and metrics on the admin port
        base = f"http://127.0.0.1:{svc.settings.admin_port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/health") as r:
                body = await r.json()
                assert r.status == 200 and body["ready"] and body["pods"] == 2

            # one pod goes away: published not-ready with an error, the other stays ready
            await pod1.stop()
            snap = await snaps.wait_for(lambda p: not p["pod-1"].ready)
            gone, alive = snap.pods[1], snap.pods[0]
            assert gone.name == "pod-1" and gone.error
            assert alive.ready and alive.error is None
            # (the first failure may be a dropped keep-alive connection; then refusals)
            snap = await snaps.wait_for(lambda p: (p["pod-1"].error or "").startswith("connect"))
            assert snap.pods[0].ready
            # and it stays that way in later snapshots
            snap = await snaps.wait_for(lambda p: True)
            assert snap.pods[0].ready and not snap.pods[1].ready

            async with http.get(base + "/metrics") as r:
                text = await r.text()
        assert 'headroom_collector_scrape_duration_seconds_count{pod="pod-0"}' in text
        assert 'headroom_collector_scrape_errors_total{pod="pod-1",reason="connect"}' in text
        assert "headroom_collector_pods_ready 1.0" in text
        assert "headroom_collector_parse_ignored_lines_total 0.0" in text
        published = [
            line for line in text.splitlines()
            if line.startswith("headroom_collector_snapshots_published_total ")
        ]  # fmt: skip
        assert published and float(published[0].split()[1]) >= 3
    finally:
        await svc.stop()
        await pod0.stop()
        await pod1.stop()


async def test_hung_pod_does_not_hold_back_the_others(isolated, nc):
    fast, slow = await FakePod().start(), await FakePod().start()
    fast.page = vllm_page(waiting=1)
    snaps = await _subscribe(nc, isolated)
    svc = CollectorService(
        _settings(isolated, f"fast={fast.url},slow={slow.url}", scrape_timeout_ms=1500)
    )
    await svc.start()
    try:
        await snaps.wait_for(lambda p: p["slow"].ready and p["fast"].ready)
        slow.hang = asyncio.Event()  # from now on /metrics never answers
        fast.page = vllm_page(waiting=2)
        # While the slow pod hangs (before its timeout), snapshots keep coming with fresh
        # values for the fast pod and the slow pod's last good record.
        snap = await snaps.wait_for(lambda p: p["fast"].waiting == 2)
        recs = {p.name: p for p in snap.pods}
        if recs["slow"].ready:  # not yet timed out: carried-over record
            assert recs["slow"].scraped_at <= recs["fast"].scraped_at
        # After the timeout the slow pod is published not ready with a timeout error.
        snap = await snaps.wait_for(lambda p: not p["slow"].ready)
        recs = {p.name: p for p in snap.pods}
        assert recs["slow"].error.startswith("timeout")
        assert recs["fast"].ready
        # Recovery.
        slow.hang.set()
        slow.hang = None
        await snaps.wait_for(lambda p: p["slow"].ready)
    finally:
        await svc.stop()
        await fast.stop()
        await slow.stop()


async def test_health_not_ready_before_start_and_no_pods_is_fine(isolated, nc):
    snaps = await _subscribe(nc, isolated)
    svc = CollectorService(_settings(isolated, ""))
    assert svc.health()["ready"] is False
    await svc.start()
    try:
        snap = await snaps.wait_for(lambda p: True)
        assert snap.pods == []
        for _ in range(100):
            if svc.health()["ready"]:
                break
            await asyncio.sleep(0.05)
        assert svc.health()["ready"] is True
    finally:
        await svc.stop()
    assert svc.health()["ready"] is False
