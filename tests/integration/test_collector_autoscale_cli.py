"""`headroom autoscale recommend` against a running collector and against pods directly."""

from __future__ import annotations

import asyncio

import orjson

from services.autoscale.cli import main as autoscale_main
from services.collector.service import CollectorService
from tests.integration.test_collector_k8s_jetstream import _admin_metrics
from tests.integration.test_collector_scraper import FakePod
from tests.integration.test_collector_service import _settings
from tests.unit.test_collector_engines import jetstream_page
from tests.unit.test_collector_parsers import vllm_page


async def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = await asyncio.to_thread(autoscale_main, list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


async def test_recommend_from_collector(isolated, capsys):
    pods = [await FakePod().start() for _ in range(3)]
    for p, waiting, kv in zip(pods, (12, 9, 9), (0.9, 0.7, 0.8), strict=True):
        p.page = vllm_page(waiting=waiting, running=20, kv=kv)
    spec = ",".join(f"p{i}={p.url}" for i, p in enumerate(pods))
    settings = _settings(isolated, spec, max_batch_slots=32)
    svc = CollectorService(settings)
    await svc.start()
    try:
        for _ in range(250):
            m = await _admin_metrics(settings.admin_port)
            if m.get(("headroom_pool_ready_replicas", (("pool", "pool-a"),))) == 3:
                break
            await asyncio.sleep(0.02)
        admin = f"http://127.0.0.1:{settings.admin_port}"
        rc, out, err = await _cli(capsys, "recommend", "--collector", admin, "--json")
        assert rc == 0, err
        doc = orjson.loads(out)
        assert doc["pool"] == "pool-a" and doc["current"] == 3
        s = doc["strategies"]
        # backlog 30 over 3 replicas = 10 per replica, target 5 -> ceil(3 * 2) = 6
        assert s["prefill-backlog"]["signal"] == 10.0
        assert s["prefill-backlog"]["recommended"] == 6
        assert s["prefill-backlog"]["collector_recommended"] == 6
        # 20 running of 32 slots = 0.625 -> ceil(3 * 0.625 / 0.9) = ceil(2.08) = 3
        assert s["slots-used"]["signal"] == 0.625
        assert s["slots-used"]["recommended"] == 3
        # kv 0.8 mean: exactly the target -> keep 3
        assert s["kv-usage"]["recommended"] == 3

        rc, out, _ = await _cli(
            capsys, "recommend", "--collector", admin, "--target-prefill-backlog", "10"
        )
        assert rc == 0
        assert "prefill-backlog" in out and "HPA would reach" in out
        line = next(ln for ln in out.splitlines() if ln.startswith("prefill-backlog"))
        assert line.split()[1:6] == ["10.000", "10", "1.00", "3", "3"]
    finally:
        await svc.stop()
        for p in pods:
            await p.stop()


async def test_recommend_from_pods_directly(capsys):
    a, b = await FakePod().start(), await FakePod().start()
    a.page = jetstream_page(prefill=8, slots=(1.0, 1.0), generate=0)
    b.page = jetstream_page(prefill=4, slots=(0.5, 1.0), generate=0)
    try:
        rc, out, err = await _cli(
            capsys, "recommend", "--pods", f"a={a.url},b={b.url}", "--engine", "jetstream",
            "--json", "--samples", "2", "--interval-s", "0.05",
        )  # fmt: skip
        assert rc == 0, err
        s = orjson.loads(out)["strategies"]
        assert s["prefill-backlog"]["signal"] == 6.0
        assert s["prefill-backlog"]["recommended"] == 3  # ceil(2 * 6/5)
        assert s["slots-used"]["signal"] == 0.875
        assert s["slots-used"]["recommended"] == 2  # 0.875/0.9: within tolerance
    finally:
        await a.stop()
        await b.stop()


async def test_unreachable_collector_fails_cleanly(capsys):
    rc, _, err = await _cli(capsys, "recommend", "--collector", "http://127.0.0.1:9")
    assert rc == 1 and "cannot read" in err
