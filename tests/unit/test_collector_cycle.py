"""The scrape cycle (no network): concurrency, carry-over of slow pods, no pile-up,
discovery changes. The scraper here is a scripted stand-in with the Scraper's interface."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from services.collector.discovery import PodTarget
from services.collector.metrics import CollectorMetrics
from services.collector.scraper import ScrapeOutcome, error_record
from services.collector.service import Collector
from shared.schemas import PodRecord, PodSnapshot


class MutableDiscovery:
    def __init__(self, targets: list[PodTarget]) -> None:
        self.list = targets

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def targets(self) -> Sequence[PodTarget]:
        return self.list


class ScriptedScraper:
    """Each pod answers immediately unless a gate (asyncio.Event) is registered for it."""

    engine = "vllm"
    timeout_s = 5.0

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.calls: dict[str, int] = {}
        self.inflight: dict[str, int] = {}
        self.max_inflight: dict[str, int] = {}
        self.fail: set[str] = set()
        self.now = 1000.0
        self.forgotten: list[str] = []

    def forget(self, name: str) -> None:
        self.forgotten.append(name)

    async def scrape(self, t: PodTarget) -> ScrapeOutcome:
        self.calls[t.name] = self.calls.get(t.name, 0) + 1
        self.inflight[t.name] = self.inflight.get(t.name, 0) + 1
        self.max_inflight[t.name] = max(self.max_inflight.get(t.name, 0), self.inflight[t.name])
        try:
            if t.name in self.gates:
                await self.gates[t.name].wait()
            self.now += 1
            if t.name in self.fail:
                rec = error_record(t, "vllm", "connect: refused", self.now)
                return ScrapeOutcome(rec, 0.001, reason="connect")
            rec = PodRecord(
                t.name, t.url, True, self.now, models=["m"], waiting=1.0, lora_adapters=["l"]
            )
            return ScrapeOutcome(rec, 0.001, ignored_lines=2)
        finally:
            self.inflight[t.name] -= 1


def _targets(*names: str) -> list[PodTarget]:
    return [PodTarget(n, f"http://127.0.0.1:1/{n}") for n in names]


def _collector(disc, scraper, published, interval=0.01):
    async def publish(s: PodSnapshot) -> None:
        published.append(s)

    return Collector(
        disc, scraper, publish, pool="p", interval_s=interval, metrics=CollectorMetrics(),
        clock=lambda: 2000.0,
    )  # fmt: skip


def _by_name(snap: PodSnapshot) -> dict[str, PodRecord]:
    return {p.name: p for p in snap.pods}


async def test_cycle_publishes_every_pod():
    scraper, published = ScriptedScraper(), []
    c = _collector(MutableDiscovery(_targets("a", "b")), scraper, published)
    snap = await c.run_cycle(wait_s=1.0)
    assert published == [snap] and snap.pool == "p" and snap.ts == 2000.0
    assert [p.name for p in snap.pods] == ["a", "b"]
    assert all(p.ready for p in snap.pods)
    PodSnapshot.decode(snap.encode())  # valid on the wire
    reg = c.metrics.registry
    assert reg.get_sample_value("headroom_collector_snapshots_published_total") == 1
    assert reg.get_sample_value("headroom_collector_pods_ready") == 2
    assert reg.get_sample_value("headroom_collector_parse_ignored_lines_total") == 4
    assert [p.lora_adapters for p in snap.pods] == [["l"], ["l"]]


async def test_slow_pod_is_carried_over_and_never_scraped_twice_at_once():
    scraper, published = ScriptedScraper(), []
    c = _collector(MutableDiscovery(_targets("fast", "slow")), scraper, published)
    await c.run_cycle(wait_s=1.0)  # both answered once
    gate = scraper.gates["slow"] = asyncio.Event()
    first_slow = _by_name(published[-1])["slow"]
    for _ in range(5):
        snap = await c.run_cycle(wait_s=0.01)
        recs = _by_name(snap)
        assert recs["fast"].ready
        assert recs["slow"] == first_slow  # previous record carried, old scraped_at
    assert scraper.calls["fast"] == 6
    assert scraper.calls["slow"] == 2  # one hung scrape, not five
    assert scraper.max_inflight["slow"] == 1
    gate.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    snap = await c.run_cycle(wait_s=1.0)
    assert _by_name(snap)["slow"].scraped_at > first_slow.scraped_at
    await c.aclose()


async def test_new_pod_is_pending_until_first_result():
    scraper, published = ScriptedScraper(), []
    scraper.gates["new"] = asyncio.Event()
    c = _collector(MutableDiscovery(_targets("new")), scraper, published)
    snap = await c.run_cycle(wait_s=0.01)
    (rec,) = snap.pods
    assert not rec.ready and rec.error.startswith("pending") and rec.error_reason == "pending"
    await c.aclose()


async def test_failures_are_published_and_counted():
    scraper, published = ScriptedScraper(), []
    scraper.fail.add("b")
    c = _collector(MutableDiscovery(_targets("a", "b")), scraper, published)
    recs = _by_name(await c.run_cycle(wait_s=1.0))
    assert recs["a"].ready and not recs["b"].ready and recs["b"].error == "connect: refused"
    reg = c.metrics.registry
    assert reg.get_sample_value("headroom_collector_pods_ready") == 1
    errs = reg.get_sample_value(
        "headroom_collector_scrape_errors_total", {"pod": "b", "reason": "connect"}
    )
    assert errs == 1


async def test_removed_pod_disappears_and_its_metrics_are_dropped():
    scraper, published = ScriptedScraper(), []
    scraper.fail.add("b")
    disc = MutableDiscovery(_targets("a", "b"))
    c = _collector(disc, scraper, published)
    await c.run_cycle(wait_s=1.0)
    disc.list = _targets("a")
    snap = await c.run_cycle(wait_s=1.0)
    assert [p.name for p in snap.pods] == ["a"]
    assert scraper.forgotten == ["b"]  # the scraper drops what it cached about b
    reg = c.metrics.registry
    assert (
        reg.get_sample_value(
            "headroom_collector_scrape_errors_total", {"pod": "b", "reason": "connect"}
        )
        is None
    )
    assert (
        reg.get_sample_value("headroom_collector_scrape_duration_seconds_count", {"pod": "b"})
        is None
    )


async def test_publish_failure_is_counted_not_raised():
    scraper = ScriptedScraper()

    async def broken(_: PodSnapshot) -> None:
        raise ConnectionError("nats down")

    c = Collector(MutableDiscovery(_targets("a")), scraper, broken, pool="p", interval_s=0.01)
    await c.run_cycle(wait_s=1.0)
    assert c.metrics.registry.get_sample_value("headroom_collector_publish_errors_total") == 1


async def test_run_loop_stops_and_cancels_inflight():
    scraper, published = ScriptedScraper(), []
    scraper.gates["hang"] = asyncio.Event()
    c = _collector(MutableDiscovery(_targets("a", "hang")), scraper, published, interval=0.01)
    scraper.timeout_s = 0.05  # first cycle waits this long at most
    stop = asyncio.Event()
    task = asyncio.create_task(c.run(stop))
    for _ in range(500):
        if len(published) >= 5:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert len(published) >= 5
    assert scraper.calls["hang"] == 1
    assert scraper.inflight["hang"] == 0  # cancelled on stop
