"""A trainer killed mid-stream and restarted loses no acknowledged sample and never trains on
a sample twice (real NATS JetStream and Redis; in-process kill and a real SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import aiohttp

from services.trainer.fitting import TrainingData
from services.trainer.service import TrainerService
from shared import embedded
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import current_version, load_version
from shared.subjects import Names
from tests.integration.trainer_harness import (
    all_acked,
    eventually,
    make_samples,
    metric,
    publish_samples,
    trainer_settings,
)

KILL_SETTINGS = dict(
    fetch_batch=16, ack_wait_s=1.0, window_size=100_000, bucket_cap=100_000, interval_s=60.0
)


async def test_killed_trainer_restarts_with_every_sample_exactly_once(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    first, second = make_samples(300, prefix="a", seed=1), make_samples(300, prefix="b", seed=2)
    published = {s.request_id for s in first + second}
    await publish_samples(js, names, first)

    a = TrainerService(trainer_settings(isolated, **KILL_SETTINGS))
    await a.start()
    feeder = asyncio.create_task(publish_samples(js, names, second))  # mid-stream
    await eventually(lambda: len(a.window) >= 200)
    await a.abort()  # as if the process died: in-flight messages are never acknowledged
    killed_with = set(a.window.request_ids())
    await feeder
    assert 200 <= len(killed_with) < len(published)

    b = TrainerService(trainer_settings(isolated, **KILL_SETTINGS))
    await b.start()
    try:
        await eventually(lambda: len(b.window) == len(published), within=20)
        await eventually(lambda: all_acked(js, names), within=20)
        ids = b.window.request_ids()
        assert len(ids) == len(set(ids)) == len(published)  # nothing twice
        assert set(ids) == published  # nothing lost, in particular nothing acknowledged
        assert killed_with <= set(ids)
        replayed = metric(b, "headroom_trainer_samples_replayed_total")
        received = metric(b, "headroom_trainer_samples_received_total")
        assert replayed >= len(killed_with) and replayed + received == len(published)

        data = TrainingData.from_entries(b.window.snapshot())
        assert len(data) == len(published)
        assert await b.fit_now(force=True) == "v1"
        assert (await load_version(r, names, "v1")).meta.samples == len(published)
    finally:
        await b.stop()
        await nc.close()
        await r.aclose()


async def _health(port: int) -> dict | None:
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                return await resp.json()
    except (aiohttp.ClientError, TimeoutError):
        return None


def _start(isolated: dict, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "HEADROOM_NATS_URL": isolated["nats_url"],
        "HEADROOM_REDIS_URL": isolated["redis_url"],
        "HEADROOM_NAMESPACE": isolated["namespace"],
        "HEADROOM_TRAINER_ADMIN_PORT": str(port),
        "HEADROOM_TRAINER_FETCH_BATCH": "8",
        "HEADROOM_TRAINER_ACK_WAIT_S": "1",
        "HEADROOM_TRAINER_INTERVAL_S": "0.5",
        "HEADROOM_TRAINER_MIN_SAMPLES": "30",
        "HEADROOM_TRAINER_MIN_NEW_SAMPLES": "1000000",
        "HEADROOM_TRAINER_ROUNDS": "10",
        "HEADROOM_TRAINER_BUCKET_CAP": "100000",
        "HEADROOM_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.trainer"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_sigkilled_trainer_process_loses_nothing(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    samples = make_samples(400, prefix="k", seed=3)
    await publish_samples(js, names, samples[:200])
    port = embedded.free_port()
    proc = _start(isolated, port)
    try:
        feeder = asyncio.create_task(publish_samples(js, names, samples[200:]))
        await eventually(lambda: _window_at_least(port, 150), within=20)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        await feeder
        proc = _start(isolated, port)
        await eventually(lambda: _window_at_least(port, len(samples)), within=20)
        await eventually(lambda: all_acked(js, names), within=20)
        health = await _health(port)
        assert health["window"] == len(samples)  # not one more, not one less
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
    # The window a restarted trainer rebuilds, and the model it fits, hold each sample once.
    svc = TrainerService(trainer_settings(isolated, interval_s=60.0, bucket_cap=100_000))
    await svc.start()
    try:
        ids = svc.window.request_ids()
        assert len(ids) == len(set(ids)) == len(samples)
        assert await svc.fit_now(force=True) is not None
        meta = (await load_version(r, names, await current_version(r, names))).meta
        assert meta.samples == len(samples)
    finally:
        await svc.stop()
        await nc.close()
        await r.aclose()


async def _window_at_least(port: int, n: int) -> bool:
    h = await _health(port)
    return bool(h and h.get("window", 0) >= n)
