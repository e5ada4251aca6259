"""The collector against the real simulated vLLM pods (services/simulator/server.py)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from services.collector.service import CollectorService
from services.simulator.server import start_pod
from services.simulator.settings import DEFAULT_MODEL
from shared.bus import connect_nats
from tests.integration.test_collector_service import _settings, _subscribe

PROMPT = "The quick brown fox jumps over the lazy dog. " * 20


@pytest.fixture
async def nc(isolated):
    c = await connect_nats(isolated["nats_url"], "test-collector-sim")
    yield c
    await c.close()


async def _complete(url: str, max_tokens: int) -> dict:
    body = {"model": DEFAULT_MODEL, "prompt": PROMPT, "max_tokens": max_tokens}
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/v1/completions", json=body) as r:
            assert r.status == 200, await r.text()
            return await r.json()


async def test_collector_reads_simulated_pods(isolated, nc):
    a, b = await start_pod("sim-a"), await start_pod("sim-b")
    snaps = await _subscribe(nc, isolated)
    svc = CollectorService(_settings(isolated, f"sim-a={a.url},sim-b={b.url}"))
    await svc.start()
    try:
        snap = await snaps.wait_for(lambda p: p["sim-a"].ready and p["sim-b"].ready)
        for rec in snap.pods:
            assert rec.models == [DEFAULT_MODEL]
            assert (rec.waiting, rec.running, rec.kv_usage, rec.prefix_hit_rate) == (0, 0, 0, 0)
            assert rec.max_model_len == a.engine.max_request_tokens  # from the pod's /v1/models

        # a long request shows up as load on sim-a only
        long = asyncio.create_task(_complete(a.url, 300))
        snap = await snaps.wait_for(lambda p: p["sim-a"].running + p["sim-a"].waiting >= 1)
        recs = {p.name: p for p in snap.pods}
        assert recs["sim-b"].running == 0
        await asyncio.wait_for(long, 30)

        # the same prompt again hits the prefix cache
        await _complete(a.url, 1)
        await snaps.wait_for(lambda p: p["sim-a"].prefix_hit_rate > 0 and p["sim-a"].running == 0)

        await b.stop()
        snap = await snaps.wait_for(lambda p: not p["sim-b"].ready)
        recs = {p.name: p for p in snap.pods}
        assert recs["sim-b"].error and recs["sim-a"].ready
        reg = svc.metrics.registry
        assert reg.get_sample_value("headroom_collector_parse_ignored_lines_total") == 0
    finally:
        await svc.stop()
        await a.stop()
        await b.stop()
