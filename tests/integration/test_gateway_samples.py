"""The gateway's batched sample publisher against real NATS JetStream: every sample lands in
the stream as its own message and is counted when JetStream acknowledges it; a buffer goes
out after the linger time or at once when full; duplicates are absorbed by the stream;
no stream, no ack and a closed connection are counted as failures; drain publishes what is
buffered."""

from __future__ import annotations

import asyncio
import time

from services.gateway.metrics import GatewayMetrics
from services.gateway.samples import SamplePublisher
from shared.bus import connect_nats, ensure_samples_stream
from shared.subjects import Names
from tests.unit.trainer_synth import synthetic_samples


def counts(m: GatewayMetrics) -> tuple[float, float]:
    get = m.registry.get_sample_value
    return (
        get("headroom_gateway_samples_published_total") or 0.0,
        get("headroom_gateway_samples_failed_total") or 0.0,
    )


async def until(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def stream_messages(js, names: Names) -> int:
    return (await js.stream_info(names.samples_stream)).state.messages


async def test_samples_are_published_in_batches_and_acknowledged(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    m = GatewayMetrics()
    pub = SamplePublisher(nc, names.samples("p1"), m, 5.0, linger_s=0.2, max_batch=4)
    await pub.start()
    try:
        samples = synthetic_samples(6, seed=3, prefix="b-")
        for s in samples[:3]:
            pub.publish(s)
        await asyncio.sleep(0.05)
        assert pub.pending == 3 and await stream_messages(js, names) == 0  # lingering
        await until(lambda: pub.pending == 0)
        assert counts(m) == (3.0, 0.0)
        for s in samples[3:] + samples[:1]:  # 4 = max_batch: sent at once; b-0 a duplicate
            pub.publish(s)
        await until(lambda: pub.pending == 0, timeout_s=0.15)  # well before the linger time
        assert counts(m) == (7.0, 0.0)  # a duplicate is acknowledged too
        assert await stream_messages(js, names) == 6  # ... and stored once
        pub.publish(synthetic_samples(1, seed=4, prefix="late-")[0])
        await pub.drain()
        assert counts(m) == (8.0, 0.0) and await stream_messages(js, names) == 7
    finally:
        await nc.close()


async def test_failures_are_counted_not_raised(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    m = GatewayMetrics()
    try:
        # no stream captures the subject: NATS answers "no responders"
        pub = SamplePublisher(nc, names.samples("nostream"), m, 5.0, linger_s=0.0)
        await pub.start()
        pub.publish(synthetic_samples(1, prefix="n-")[0])
        await until(lambda: pub.pending == 0)
        assert counts(m) == (0.0, 1.0)

        # somebody listens but never acknowledges: counted when the timeout passes
        quiet = names.samples("quiet")

        async def ignore(msg) -> None:
            pass

        await nc.subscribe(quiet, cb=ignore)
        await nc.flush()
        pub2 = SamplePublisher(nc, quiet, m, 0.2, linger_s=0.0)
        await pub2.start()
        pub2.publish(synthetic_samples(1, prefix="q-")[0])
        await asyncio.sleep(0.1)
        assert pub2.pending == 1 and counts(m) == (0.0, 1.0)
        await until(lambda: pub2.pending == 0)
        assert counts(m) == (0.0, 2.0)

        # an invalid sample never reaches NATS
        bad = synthetic_samples(1, prefix="x-")[0]
        bad.ttft_ms = -1.0
        pub.publish(bad)
        assert pub.pending == 0 and counts(m) == (0.0, 3.0)
        await pub.drain()
        await pub2.drain()
    finally:
        await nc.close()
    # a closed connection: the buffered sample fails when it is sent
    pub.publish(synthetic_samples(1, prefix="c-")[0])
    await pub.drain()
    assert counts(m) == (0.0, 4.0) and pub.pending == 0


async def test_samples_awaiting_acks_are_bounded(isolated):
    """Nobody acknowledges (a NATS outage looks the same to the publisher): past
    ``max_pending`` new samples are dropped and counted, so memory stays bounded."""
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    m = GatewayMetrics()
    try:
        quiet = names.samples("quiet-cap")

        async def ignore(msg) -> None:
            pass

        await nc.subscribe(quiet, cb=ignore)
        await nc.flush()
        pub = SamplePublisher(nc, quiet, m, 30.0, linger_s=0.0, max_pending=5)
        await pub.start()
        for s in synthetic_samples(12, prefix="cap-"):
            pub.publish(s)
            await asyncio.sleep(0)
        await until(lambda: not pub._buffer and not pub._flushing)
        assert len(pub._waiting) == 5
        assert counts(m) == (0.0, 7.0)
        await pub.drain(timeout_s=0.1)
    finally:
        await nc.close()
