"""A pod failing before the first byte is retried on the next-ranked pod, whatever the way it
fails: it hangs (no response head within the first-byte timeout), answers 500, refuses the
connection, or sends a malformed first event; the client never sees it. The simulator's
fault injection (services/simulator/faults.py) makes each failure real."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tests.integration.gateway_harness import MODEL, gateway_stack, metric, wait_for
from tests.integration.test_gateway_pod_client import (
    CHUNKED,
    _answered,
    _fill,
    _full_accept_queue,
)

pytestmark = pytest.mark.timeout(60)
CMPL = "/v1/completions"
# pod-0 looks idle and pod-1 busy, so the fallback ranks pod-0 first
LOADS = {"pod-0": {}, "pod-1": {"waiting": 4.0, "running": 8.0, "kv_usage": 0.6}}


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"mode": "hang", "delay_s": 30.0}, "first_byte_timeout"),
        ({"mode": "error", "status": 500}, "http_500"),
        ({"mode": "malformed", "after_tokens": 0}, "before_first_event_bad_chunk"),
        (None, "connect"),  # the pod is gone: connection refused
    ],
    ids=["hang", "500", "malformed-sse", "refused"],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_failure_before_the_first_byte_is_retried_on_the_next_pod(
    isolated, fault, reason, stream
):
    async with gateway_stack(isolated, pod_first_byte_timeout_s=0.5, profile="gie-default",
                             predict_timeout_ms=50) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        body = {"model": MODEL, "prompt": "hello there", "max_tokens": 4, "stream": stream}
        status, h, _ = await (st.stream if stream else st.post)(CMPL, body)
        assert status == 200 and h["x-headroom-pod"] == "pod-0"  # the ranking as intended

        if fault is None:
            await st.pod("pod-0").stop()
        else:
            await st.fault("pod-0", count=1, **fault)
        status, h, out = await (st.stream if stream else st.post)(CMPL, body)
        assert status == 200 and h["x-headroom-pod"] == "pod-1", (status, h, out)
        if stream:
            assert out[-1] == "[DONE]" and not any("error" in e for e in out[:-1])
        else:
            assert out["usage"]["completion_tokens"] == 4

        m = await st.metrics()
        assert metric(m, "headroom_gateway_retries_total", reason=reason) == 1
        assert sum(v for (n, _), v in m.items()
                   if n == "headroom_gateway_requests_failed_total") == 0  # fmt: skip
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="in-flight drained")
        if fault is None:
            st.pods.remove(st.pod("pod-0"))  # already stopped


async def test_a_hung_pod_costs_one_request_then_is_left_out_until_it_is_probed(isolated):
    """Outlier ejection: after the first request to the hung pod times out (and is retried),
    the next ones go straight to the other pod; once the ejection is over one request
    probes the pod again, fails, and the pod is out twice as long."""
    # ejections long enough that a loaded box sends the 5 requests within the first one
    async with gateway_stack(isolated, pod_first_byte_timeout_s=0.3, pod_eject_s=4.0,
                             profile="gie-default", predict_timeout_ms=50) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        await st.fault("pod-0", mode="hang", count=1000, delay_s=30.0)
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 2, "stream": True}
        for _ in range(5):
            status, h, out = await st.stream(CMPL, body)
            assert status == 200 and h["x-headroom-pod"] == "pod-1" and out[-1] == "[DONE]"
        m = await st.metrics()
        assert metric(m, "headroom_gateway_retries_total", reason="first_byte_timeout") == 1
        assert metric(m, "headroom_gateway_pod_ejections_total",
                      reason="first_byte_timeout") == 1  # fmt: skip
        await wait_for(lambda: not st.gw.outliers.ejected("pod-0", st.gw.clock()), 10.0,
                       "the ejection to end")  # fmt: skip
        status, h, _ = await st.stream(CMPL, body)  # probes pod-0: fails, retried
        assert status == 200 and h["x-headroom-pod"] == "pod-1"
        m = await st.metrics()
        assert metric(m, "headroom_gateway_retries_total", reason="first_byte_timeout") == 2
        assert st.gw.outliers.ejected("pod-0", st.gw.clock())
        assert st.gw.outliers._pods["pod-0"].span_s == 8.0
        await st.fault("pod-0", mode="off")


async def test_a_pod_too_busy_to_accept_is_retried_elsewhere_and_not_ejected(isolated):
    """A pod that streams to the gateway on one connection while its accept queue is full
    (a real listener nobody accepts from): the request's connect times out, is retried on
    the next pod, and the pod is not ejected: it is alive, only slow to accept."""
    loop = asyncio.get_running_loop()
    async with (
        gateway_stack(isolated, n_pods=1, pod_connect_timeout_s=0.5, profile="gie-default",
                      predict_timeout_ms=50) as st,
        _full_accept_queue() as (lsock, url, fillers),
    ):  # fmt: skip
        busy = SimpleNamespace(name="pod-busy", url=url)
        loads = {"pod-busy": {}, "pod-0": {"waiting": 4.0, "running": 8.0, "kv_usage": 0.6}}
        await st.snapshot(pods=[busy, st.pod("pod-0")], loads=loads)
        # the gateway's own pod client is being streamed to by the busy pod
        conn, resp = await _answered(lsock, st.gw.pod_client.post(url, CMPL, b"{}", {}), CHUNKED)
        stop = asyncio.Event()

        async def trickle() -> None:
            while not stop.is_set():
                await loop.sock_sendall(conn, b"5\r\ndata:\r\n")
                await asyncio.sleep(0.05)

        streaming = asyncio.ensure_future(trickle())
        try:
            await _fill(url, fillers)
            body = {"model": MODEL, "prompt": "hello", "max_tokens": 2, "stream": True}
            status, h, out = await st.stream(CMPL, body)
            assert status == 200 and h["x-headroom-pod"] == "pod-0" and out[-1] == "[DONE]"
            m = await st.metrics()
            assert metric(m, "headroom_gateway_retries_total", reason="connect_busy") == 1
            assert metric(m, "headroom_gateway_pod_connects_busy_total") == 1
            assert sum(v for (n, _), v in m.items()
                       if n == "headroom_gateway_pod_ejections_total") == 0  # fmt: skip
            assert not st.gw.outliers.ejected("pod-busy", st.gw.clock())
        finally:
            stop.set()
            await streaming
            resp.close()
            conn.close()
