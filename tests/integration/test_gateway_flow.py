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


async def test_client_ttft_counts_the_queue_and_judges_the_slo(isolated, tmp_path):
    """A request that waits in the gateway's queue: its client-side TTFT (arrival to first
    token) includes the wait, the pod-side TTFT does not; its TTFT SLO is judged on the
    client's."""
    path = _profiles(tmp_path, bypassHopeless=False)  # it waits even when hopeless
    async with gateway_stack(isolated, n_pods=1, profiles_path=path) as st:
        await st.snapshot(loads={"pod-0": {}})
        flow = st.gw.flows["headroom"]
        blocker = await _occupy(st, 8, max_tokens=4)  # ~0.85 s of prefill
        body = {**_body(20, 9), "stream": True}
        queued = asyncio.create_task(
            st.http.post(st.url + CMPL, json=body, headers={"x-llm-d-slo-ttft-ms": "400"})
        )
        await wait_for(lambda: flow.queued == 1, 10, "request queued")
        async with await queued as r:
            assert r.status == 200
            await r.read()
        assert (await blocker)[0] == 200
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, 10, "all settled")
        samples = {s.input_tokens: s for s, _ in await st.samples(2)}
        pod_ttft_ms = min(samples.values(), key=lambda s: s.input_tokens).ttft_ms
        m = await st.metrics()
        wait_s = metric(m, "headroom_gateway_queue_wait_seconds_sum", reason="room")
        client_sum = metric(m, "headroom_gateway_client_ttft_seconds_sum", model_name=MODEL)
        pod_sum = metric(m, "inference_objective_request_ttft_seconds_sum", model_name=MODEL)
        assert metric(m, "headroom_gateway_client_ttft_seconds_count", model_name=MODEL) == 2
        assert pod_ttft_ms < 400 < wait_s * 1000  # on the pod it was quick; it waited long
        assert client_sum >= pod_sum + wait_s
        # judged on the client's TTFT (over 400 ms), not the pod's (under it)
        assert metric(m, "inference_objective_request_ttft_slo_violation_total",
                      model_name=MODEL) == 1  # fmt: skip
        assert metric(m, "inference_objective_request_slo_violation_total",
                      model_name=MODEL, type="ttft") == 1  # fmt: skip
