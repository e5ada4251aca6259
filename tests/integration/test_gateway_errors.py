"""Gateway failure paths with real simulator pods and real NATS: 400s, 404, 503 +
Retry-After, retry on the next pod after an injected error, mid-stream drops, 502s; failed
requests are counted and never sampled; in-flight counters always return to zero."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.integration.gateway_harness import MODEL, gateway_stack, metric, wait_for

pytestmark = pytest.mark.timeout(60)

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CMPL, b"{oops", None),
        (CMPL, {"prompt": "x"}, "model"),
        (CMPL, {"model": MODEL}, "prompt"),
        (CMPL, {"model": MODEL, "prompt": 7}, "prompt"),
        (CMPL, {"model": MODEL, "prompt": "x", "max_tokens": "9"}, "max_tokens"),
        (CMPL, {"model": MODEL, "prompt": "x", "stream": "true"}, "stream"),
        (CHAT, {"model": MODEL}, "messages"),
        (
            CHAT,
            {"model": MODEL, "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
        ),
    ],
)
async def test_bad_requests_are_400(isolated, path, body, param):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        status, h, err = await st.post(path, body)
        assert status == 400
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["param"] == param
        assert set(err["error"]) == {"message", "type", "param", "code"}
        assert "x-request-id" in h


async def test_unknown_model_404_and_no_ready_pod_503(isolated):
    async with gateway_stack(isolated, retry_after_s=3) as st:
        # no pod known at all: 503
        status, h, err = await st.post(CMPL, {"model": MODEL, "prompt": "x"})
        assert status == 503 and h["retry-after"] == "3"
        assert err["error"]["code"] == "no_ready_pod"

        await st.snapshot()
        status, _, err = await st.post(CMPL, {"model": "nope", "prompt": "x"})
        assert status == 404
        assert err["error"]["code"] == "model_not_found" and err["error"]["param"] == "model"

        await st.snapshot(ready={"pod-0": False, "pod-1": False})
        status, h, err = await st.post(
            CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
        )
        assert status == 503 and h["retry-after"] == "3"

        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="404") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="503") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=CHAT, status="503") == 1


# pod-0 looks idle and pod-1 busy, so the composite fallback ranks pod-0 first
LOADS = {"pod-0": {}, "pod-1": {"waiting": 4.0, "running": 8.0, "kv_usage": 0.6}}


@pytest.mark.parametrize("stream", [False, True])
async def test_error_before_first_byte_is_retried_on_the_next_pod(isolated, stream):
    async with gateway_stack(isolated) as st:
        await st.snapshot(loads=LOADS)
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 3, "stream": stream}
        status, h, _ = await (st.stream if stream else st.post)(CMPL, body)
        assert status == 200 and h["x-headroom-pod"] == "pod-0"  # ranking as intended

        # a long prompt no pod has seen: the prefix index records its blocks on pod-0 when
        # it is sent there, and forgets them when pod-0 fails before its first byte; pod-1,
        # which served it, holds them
        held = {p: st.gw.index.blocks(p) for p in ("pod-0", "pod-1")}
        body = {**body, "prompt": "a prompt no pod has seen before " * 60}
        await st.fault("pod-0", mode="error", count=1, status=503)
        status, h, out = await (st.stream if stream else st.post)(CMPL, body)
        assert status == 200 and h["x-headroom-pod"] == "pod-1"
        if stream:
            assert out[-1] == "[DONE]"
        else:
            assert out["usage"]["completion_tokens"] == 3
        assert st.gw.index.blocks("pod-0") == held["pod-0"]
        assert st.gw.index.blocks("pod-1") > held["pod-1"]

        m = await st.metrics()
        assert sum(v for (n, _), v in m.items() if n == "headroom_gateway_retries_total") == 1
        assert sum(v for (n, _), v in m.items()
                   if n == "headroom_gateway_requests_failed_total") == 0  # fmt: skip
        assert await st.samples(2)
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="in-flight drained")


async def test_all_pods_failing_before_first_byte_gives_502(isolated):
    async with gateway_stack(isolated, n_pods=2) as st:
        await st.snapshot(loads=LOADS)
        await st.fault("pod-0", mode="error", count=1, status=500)
        await st.fault("pod-1", mode="error", count=1, status=502)
        status, _, err = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 502 and err["error"]["code"] == "pod_unavailable"
        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_failed_total", reason="pod_unavailable") == 1
        assert st.gw.view.total_in_flight() == 0
        assert st.gw.samples.pending == 0 and await st.sample_count() == 0


async def test_retry_disabled_fails_fast(isolated):
    async with gateway_stack(isolated, retry_before_first_byte=False) as st:
        await st.snapshot(loads=LOADS)
        await st.fault("pod-0", mode="error", count=1)
        status, _, _ = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 502


async def test_pod_4xx_is_passed_through_without_retry(isolated):
    async with gateway_stack(isolated) as st:
        await st.snapshot(loads=LOADS)
        await st.fault("pod-0", mode="error", count=1, status=429)
        status, h, err = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 429 and h["x-headroom-pod"] == "pod-0"
        assert "error" in err
        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_failed_total", reason="pod_rejected") == 1


async def test_mid_stream_drop_ends_stream_with_error_event_then_next_request_works(isolated):
    # no outlier ejection here: the same pod must serve the next request
    # (tests/integration/test_gateway_pod_faults.py covers the ejection)
    async with gateway_stack(isolated, pod_eject_s=0) as st:
        await st.snapshot(loads=LOADS)
        await st.fault("pod-0", mode="drop", count=1, after_tokens=2)
        body = {"model": MODEL, "prompt": "tell me", "max_tokens": 8, "stream": True}
        status, h, events = await st.stream(CMPL, body)
        assert status == 200 and h["x-headroom-pod"] == "pod-0"
        assert "[DONE]" not in events
        assert "error" in events[-1] and events[-1]["error"]["code"] == "pod_stream_failed"
        assert 1 <= sum(1 for e in events if "choices" in e) <= 2

        # the gateway keeps serving: the next request (same pod) completes
        status, h, events = await st.stream(CMPL, body)
        assert status == 200 and events[-1] == "[DONE]" and h["x-headroom-pod"] == "pod-0"

        # a non-streaming client gets 502 when the pod dies mid-response
        await st.fault("pod-0", mode="drop", count=1, after_tokens=2)
        status, _, err = await st.post(CMPL, {**body, "stream": False})
        assert status == 502 and err["error"]["type"] == "upstream_error"

        m = await st.metrics()
        failed = {dict(lb)["reason"]: v for (n, lb), v in m.items()
                  if n == "headroom_gateway_requests_failed_total"}  # fmt: skip
        assert sum(failed.values()) == 2 and all(r.startswith("mid_stream_") for r in failed)
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="in-flight drained")
        assert st.gw.view.in_flight("pod-0") == (0, 0.0, 0.0)
        # only the one successful request became a sample
        assert len(await st.samples(1)) == 1
        await wait_for(lambda: st.gw.samples.pending == 0, what="publications done")
        assert await st.sample_count() == 1


async def test_client_disconnect_mid_stream_is_counted_and_settled(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "long answer", "max_tokens": 400, "stream": True}
        async with st.http.post(st.url + CMPL, json=body) as r:
            assert r.status == 200
            await r.content.readline()  # first event arrived
            r.close()  # client goes away
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, 10, "in-flight settled")

        async def disconnects() -> float:
            m = await st.metrics()
            return metric(m, "headroom_gateway_requests_failed_total", reason="client_disconnect")

        for _ in range(100):
            if await disconnects() == 1:
                break
            await asyncio.sleep(0.02)
        assert await disconnects() == 1
        assert await st.sample_count() == 0
        status, _, _ = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 200


async def test_garbage_body_types(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        status, _, err = await st.post(CMPL, orjson.dumps([1, 2]))
        assert status == 400 and err["error"]["code"] == "invalid_json"
