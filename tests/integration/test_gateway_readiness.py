"""Readiness through a NATS restart (real gateway, real simulator pods, a nats-server of the
test's own on a free port, so it can be stopped and started again without touching the
machine's shared NATS): /readyz stays 200 through a 2 s outage while the gateway routes on
its last view (predictions fall back at once), /health reports the outage as before (503),
/livez is 200 throughout; an outage longer than the grace turns readiness false."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.embedded import start_nats
from tests.integration.gateway_harness import MODEL, Stack, gateway_stack, wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def own_nats():
    server = start_nats()
    try:
        yield server
    finally:
        server.stop()


async def _get(st: Stack, path: str) -> tuple[int, dict]:
    async with st.http.get(st.url + path) as r:
        return r.status, await r.json()


async def _hold(st: Stack, seconds: float) -> list[tuple[int, str]]:
    """/readyz every 50 ms for ``seconds``: the (status, verdict) pairs seen."""
    seen = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status, body = await _get(st, "/readyz")
        seen.append((status, body["status"]))
        await asyncio.sleep(0.05)
    return seen


async def test_readiness_stays_true_through_a_short_nats_restart(own_nats, names):
    infra = {"nats_url": own_nats.url, "names": names}
    # headroom-learned asks the predictors on every request (headroom: only sheddable SLO ones)
    async with gateway_stack(
        infra, n_pods=2, nats_outage_grace_s=4.0, profile="headroom-learned"
    ) as st:
        await st.snapshot()
        assert await _get(st, "/readyz") == (
            200, {"status": "ok", "ready": True, "nats_connected": True,
                  "pods": {"ready": 2, "stale": 0, "missed": 0}},
        )  # fmt: skip
        own_nats.stop_process()
        await wait_for(lambda: not st.gw.nats_connected, 5, "the gateway sees NATS down")
        outage_start = time.monotonic()
        # routed on the last view and the gateway's own counts; no predictor: fallback at once
        t0 = time.perf_counter()
        status, h, body = await st.post(
            "/v1/completions", {"model": MODEL, "prompt": "hello", "max_tokens": 3}
        )
        assert status == 200 and body["choices"][0]["text"]
        assert h["x-headroom-fallback-reason"] == "nats_disconnected"
        assert time.perf_counter() - t0 < st.gw.settings.predict_timeout_ms / 1000 + 1.0
        status, health = await _get(st, "/health")
        assert status == 503 and health["status"] == "nats_disconnected"  # as before
        assert (await _get(st, "/livez"))[0] == 200
        seen = await _hold(st, 2.0 - (time.monotonic() - outage_start))
        assert seen and set(seen) == {(200, "nats_outage")}, seen
        own_nats.restart()  # 2 s after it went away
        seen = []
        while not st.gw.nats_connected:  # reconnecting (every 0.5 s)
            seen += await _hold(st, 0.1)
        assert set(seen) <= {(200, "nats_outage"), (200, "ok")}, seen
        assert await _get(st, "/readyz") == (
            200, {"status": "ok", "ready": True, "nats_connected": True,
                  "pods": {"ready": 2, "stale": 0, "missed": 0}},
        )  # fmt: skip
        # a longer outage: past the grace (4 s), readiness turns false
        own_nats.stop_process()
        await wait_for(lambda: not st.gw.nats_connected, 5, "the gateway sees NATS down")
        down_at = time.monotonic()
        await wait_for(lambda: not st.gw.readiness().ready, 10, "readiness false")
        assert time.monotonic() - down_at >= 3.5
        assert await _get(st, "/readyz") == (
            503, {"status": "nats_disconnected", "ready": False, "nats_connected": False,
                  "pods": {"ready": 2, "stale": 0, "missed": 0}},
        )  # fmt: skip
        own_nats.restart()
        await wait_for(lambda: st.gw.readiness().ready, 10, "ready again")
