"""A client that leaves is noticed at every stage of its request (real gateway, real
simulator pods over loopback, real NATS): the request leaves the flow-control queue, its pod
request is dropped (the pod aborts it: its engine has no work left) and the gateway's
in-flight accounting is released, all within 100 ms of the client closing its connection;
the disconnect is counted by stage (headroom_gateway_client_disconnects_total) and as a 499.

The 100 ms are measured from the moment the client closes its socket to the moment the
condition holds, polled every millisecond in the same event loop (everything runs in this
test's process). Times are printed (-s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import orjson
import pytest

from shared.tokenizer import synth_text
from tests.integration.gateway_harness import (
    MODEL,
    Stack,
    flow_profiles,
    gateway_stack,
    metric,
    predictor,
    wait_for,
)

pytestmark = pytest.mark.timeout(90)

CMPL = "/v1/completions"
WITHIN_S = 0.1


class RawClient:
    """One HTTP/1.1 request over a plain socket, so the test decides when it closes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed_at = 0.0

    @classmethod
    async def post(cls, st: Stack, body: dict, *, cut_body_at: int | None = None) -> RawClient:
        host, port = st.url.removeprefix("http://").rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port))
        data = orjson.dumps(body)
        head = (f"POST {CMPL} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(data)}\r\n\r\n").encode()  # fmt: skip
        w.write(head + (data if cut_body_at is None else data[:cut_body_at]))
        await w.drain()
        return cls(r, w)

    async def read_some(self) -> bytes:
        return await self.reader.read(65536)

    def received_nothing(self) -> bool:
        return not self.reader._buffer  # no byte of the response yet

    def close(self) -> None:
        self.closed_at = time.perf_counter()
        self.writer.close()


async def within(client: RawClient, cond: Callable[[], bool], what: str) -> float:
    """Seconds from the client's close until ``cond`` holds (fails past 5 s)."""
    while not cond():
        if time.perf_counter() - client.closed_at > 5:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)
    took = time.perf_counter() - client.closed_at
    print(f"{what}: {took * 1000:.1f} ms after the client closed")
    return took


async def disconnects(st: Stack) -> dict[str, float]:
    m = await st.metrics()
    return {
        dict(labels)["stage"]: v
        for (name, labels), v in m.items()
        if name == "headroom_gateway_client_disconnects_total"
    }


async def assert_counted(st: Stack, stage: str, samples: int = 0) -> None:
    """Counted once, at ``stage``, as a 499; never a training sample (``samples``: those of
    the other requests)."""
    assert await disconnects(st) == {stage: 1.0}
    m = await st.metrics()
    assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="499") == 1
    assert metric(m, "headroom_gateway_requests_failed_total", reason="client_disconnect") == 1
    assert await st.sample_count() == samples


def pod_idle(st: Stack) -> Callable[[], bool]:
    engine = st.pod("pod-0").engine
    return lambda: not engine.has_work()


def long_prompt(tokens: int, seed: int) -> str:
    return synth_text(tokens, seed=seed)


async def test_leaving_while_queued_frees_the_queue_slot(isolated, tmp_path):
    async with gateway_stack(isolated, n_pods=1, profiles_path=flow_profiles(tmp_path)) as st:
        await st.snapshot(loads={"pod-0": {}})
        flow = st.gw.flows["headroom"]
        # a long prefill occupies the only pod: the next request waits in the gateway
        blocker_body = {"model": MODEL, "prompt": long_prompt(20_000, 1), "max_tokens": 20,
                        "stream": True}  # fmt: skip
        blocker = asyncio.create_task(st.stream(CMPL, blocker_body))
        await wait_for(lambda: st.gw.view.total_in_flight() == 1, 10, "blocker dispatched")
        client = await RawClient.post(
            st, {"model": MODEL, "prompt": "short", "max_tokens": 5, "stream": True}
        )
        await wait_for(lambda: flow.queued == 1, 10, "request queued")
        client.close()
        assert await within(client, lambda: flow.queued == 0, "left the queue") < WITHIN_S
        m = await st.metrics()
        assert metric(m, "headroom_gateway_queued_requests", profile="headroom") == 0
        assert st.gw.view.total_in_flight() == 1  # only the blocker: nothing was dispatched
        status, _, events = await blocker
        assert status == 200 and events[-1] == "[DONE]"
        assert flow.released["room"] == 1  # the blocker only; the departed one never went
        await assert_counted(st, "queued", samples=1)


@pytest.mark.parametrize("stream", [True, False])
async def test_leaving_while_waiting_for_the_first_token_aborts_the_pod_request(isolated, stream):
    async with gateway_stack(isolated, n_pods=1, profile="round-robin") as st:
        await st.snapshot()
        # a 40k-token prompt: ~2.7 s of prefill on the simulated H100 before the first token
        body = {"model": MODEL, "prompt": long_prompt(40_000, 2), "max_tokens": 50,
                "stream": stream}  # fmt: skip
        client = await RawClient.post(st, body)
        engine = st.pod("pod-0").engine
        await wait_for(lambda: engine.has_work(), 10, "the pod prefills the request")
        assert st.gw.view.in_flight("pod-0")[0] == 1 and client.received_nothing()
        client.close()
        took = await within(client, lambda: st.gw.view.total_in_flight() == 0, "gateway in-flight")
        assert took < WITHIN_S
        assert st.gw.view.in_flight("pod-0") == (0, 0, 0.0)
        assert await within(client, pod_idle(st), "pod aborted the request") < WITHIN_S
        assert engine.stats().request_aborted == 1 and engine.stats().request_success == 0
        await assert_counted(st, "first_token")
        # the pod and the gateway serve the next request as usual
        status, _, _ = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 200


async def test_leaving_a_non_streaming_request_stops_its_generation(isolated):
    async with gateway_stack(isolated, n_pods=1, profile="round-robin") as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "tell a long story", "max_tokens": 3000}
        client = await RawClient.post(st, body)
        engine = st.pod("pod-0").engine
        # decoding: its first token reached the gateway (decode work counted in flight)
        await wait_for(lambda: st.gw.view.in_flight("pod-0")[2] > 0, 10, "decoding")
        await asyncio.sleep(0.2)
        assert client.received_nothing() and engine.has_work()
        client.close()
        took = await within(client, lambda: st.gw.view.total_in_flight() == 0, "gateway in-flight")
        assert took < WITHIN_S
        assert await within(client, pod_idle(st), "pod aborted the generation") < WITHIN_S
        assert engine.stats().request_aborted == 1
        m = await st.metrics()
        assert metric(m, "headroom_gateway_in_flight_requests") == 0
        await assert_counted(st, "generating")


async def test_leaving_a_stream_drops_the_pod_request(isolated):
    async with gateway_stack(isolated, n_pods=1, profile="round-robin") as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "tell a long story", "max_tokens": 3000, "stream": True}
        client = await RawClient.post(st, body)
        assert b"200 OK" in await client.read_some()
        client.close()
        took = await within(client, lambda: st.gw.view.total_in_flight() == 0, "gateway in-flight")
        assert took < WITHIN_S
        assert await within(client, pod_idle(st), "pod aborted the stream") < WITHIN_S
        await assert_counted(st, "streaming")


async def test_leaving_while_routed_dispatches_nothing(isolated):
    # routing waits for the prediction call here: a predictor that does not answer within
    # the profile's budget (400 ms; the gateway's own deadline raised above it); a profile
    # whose scorer reads the predictions (headroom asks only for sheddable SLO requests)
    async with gateway_stack(
        isolated, n_pods=1, predict_timeout_ms=10_000.0, profile="headroom-learned"
    ) as st:
        await st.snapshot()
        asked = asyncio.Event()

        async def slow(rows):
            asked.set()
            await asyncio.sleep(5)

        async with predictor(st, slow):
            client = await RawClient.post(st, {"model": MODEL, "prompt": "x", "max_tokens": 2})
            await asyncio.wait_for(asked.wait(), 10)
            client.close()
            counter = st.gw.metrics.client_disconnects.labels("routing")
            took = await within(client, lambda: counter._value.get() == 1, "counted, routing")
            assert took < WITHIN_S
        assert st.gw.view.total_in_flight() == 0
        assert st.pod("pod-0").engine.stats().request_success == 0
        await assert_counted(st, "routing")


async def test_leaving_while_the_body_is_sent(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        client = await RawClient.post(
            st, {"model": MODEL, "prompt": "x" * 5000, "max_tokens": 2}, cut_body_at=100
        )
        await asyncio.sleep(0.05)
        client.close()

        async def counted() -> bool:
            return (await disconnects(st)).get("body") == 1

        for _ in range(500):
            if await counted():
                break
            await asyncio.sleep(0.01)
        assert await disconnects(st) == {"body": 1.0}
        assert st.pod("pod-0").engine.stats().request_success == 0
        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="499") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="400") == 0
