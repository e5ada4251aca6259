"""Flow control in the real gateway (real NATS, a real simulator pod): requests wait in the
gateway while the pod is busy prefilling, leave shortest first, a full queue answers 503
with Retry-After, and a client that goes away while queued leaves no trace."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.tokenizer import synth_text
from tests.integration.gateway_harness import MODEL, flow_profiles, gateway_stack, metric, wait_for

pytestmark = pytest.mark.timeout(90)

CMPL = "/v1/completions"


_profiles = flow_profiles  # any prefill in flight closes the pod; no predictor


async def _first_token_at(st, body) -> tuple[int, float | None, dict]:
    """Stream ``body``; the status, when its first token arrived, and the headers."""
    async with st.http.post(st.url + CMPL, json={**body, "stream": True}) as r:
        headers = {k.lower(): v for k, v in r.headers.items()}
        if r.status != 200:
            return r.status, None, {**headers, "body": await r.json()}
        first = None
        async for line in r.content:
            if first is None and line.startswith(b"data:") and b'"text"' in line:
                first = time.monotonic()
        return r.status, first, headers


def _body(tokens: int, seed: int, max_tokens: int = 4) -> dict:
    return {"model": MODEL, "prompt": synth_text(tokens, seed=seed), "max_tokens": max_tokens}


async def _occupy(st, seed: int, max_tokens: int) -> asyncio.Task:
    """A long prefill (20k tokens) on the only pod: the task streams it; returns once it is
    dispatched."""
    task = asyncio.create_task(_first_token_at(st, _body(20_000, seed, max_tokens=max_tokens)))
    await wait_for(lambda: st.gw.view.total_in_flight() == 1, 10, "blocker dispatched")
    return task


async def test_queued_requests_leave_shortest_first(isolated, tmp_path):
    path = _profiles(tmp_path)
    async with gateway_stack(isolated, n_pods=1, profiles_path=path) as st:
        await st.snapshot(loads={"pod-0": {}})
        flow = st.gw.flows["headroom"]
        # a long prefill occupies the pod; two requests arrive while it runs, long then short
        blocker = await _occupy(st, 1, max_tokens=200)
        long_ = asyncio.create_task(_first_token_at(st, _body(6_000, 2)))
        await wait_for(lambda: flow.queued == 1, 10, "long request queued")
        short = asyncio.create_task(_first_token_at(st, _body(20, 3)))
        await wait_for(lambda: flow.queued == 2, 10, "short request queued")
        (s1, t_long, _), (s2, t_short, _), (s0, _, _) = await asyncio.gather(long_, short, blocker)
        assert (s0, s1, s2) == (200, 200, 200)
        # without the queue the pod would have served them in arrival order (long first)
        assert t_short < t_long
        assert flow.queued == 0 and flow.released["room"] == 3
        m = await st.metrics()
        assert metric(m, "headroom_gateway_queue_wait_seconds_count", reason="room") == 3
        assert metric(m, "headroom_gateway_queued_requests", profile="headroom") == 0


async def test_full_queue_gets_503_and_a_departed_client_leaves_no_trace(isolated, tmp_path):
    path = _profiles(tmp_path, maxQueued=1)
    async with gateway_stack(isolated, n_pods=1, profiles_path=path, retry_after_s=4) as st:
        await st.snapshot(loads={"pod-0": {}})
        flow = st.gw.flows["headroom"]
        blocker = await _occupy(st, 4, max_tokens=50)
        waiting = asyncio.create_task(_first_token_at(st, _body(100, 5)))
        await wait_for(lambda: flow.queued == 1, 10, "request queued")
        status, _, h = await _first_token_at(st, _body(100, 6))
        assert status == 503 and h["retry-after"] == "4"
        assert h["body"]["error"]["code"] == "queue_full"
        # the queued client gives up: the request leaves the queue, nothing is dispatched
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await wait_for(lambda: flow.queued == 0, 10, "cancelled request left the queue")
        status, _, _ = await blocker
        assert status == 200
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, 10, "all settled")
        m = await st.metrics()
        assert metric(m, "headroom_gateway_queue_rejected_total", profile="headroom") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="503") == 1
        # the queue still works afterwards
        status, _, _ = await _first_token_at(st, _body(100, 7))
        assert status == 200
