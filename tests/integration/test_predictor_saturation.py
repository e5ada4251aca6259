"""A predictor process kept saturated with large requests keeps answering /health: batches
run in a worker thread, so the event loop stays free. The check is relative (health latency
against the predictor's own prediction-call time), not an absolute timing."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time

import aiohttp
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared import wire
from shared.bus import connect_nats, connect_redis
from shared.embedded import free_port
from shared.model_store import next_version, publish_version
from shared.subjects import Names
from tests.unit.trainer_synth import synthetic_samples, synthetic_window

ROWS = 20_000  # per request: ~0.1 s of tree work with 200 trees


async def _publish(isolated) -> str:
    cfg = FitConfig(rounds=200)
    data = TrainingData.from_samples(synthetic_samples(200, seed=8, prefix="s-"))
    r = connect_redis(isolated["redis_url"])
    try:
        version = await next_version(r, isolated["names"])
        meta, blobs = build_meta(version, 1.0, run_cycle(data, None, cfg), cfg)
        await publish_version(r, isolated["names"], meta, blobs)
    finally:
        await r.aclose()
    return version


def _spawn(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "services.predictor"], env=env)


def _metric(text: str, name: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                return s.value
    return 0.0


async def test_health_is_answered_while_saturated(isolated):
    names: Names = isolated["names"]
    version = await _publish(isolated)
    port = free_port()
    env = {
        **os.environ,
        "HEADROOM_NATS_URL": isolated["nats_url"],
        "HEADROOM_REDIS_URL": isolated["redis_url"],
        "HEADROOM_NAMESPACE": names.namespace,
        "HEADROOM_PREDICTOR_ADMIN_PORT": str(port),
        "HEADROOM_PREDICTOR_REPLICA_ID": "sat",
        "HEADROOM_PREDICTOR_MAX_BATCH_ROWS": str(4 * ROWS),  # long calls: ~0.4 s each
        "HEADROOM_LOG_LEVEL": "WARNING",
    }
    proc = _spawn(env)
    base = f"http://127.0.0.1:{port}"
    nc = await connect_nats(isolated["nats_url"], "test")
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    try:
        deadline = time.monotonic() + 30
        while True:  # until it serves the model (bounded)
            assert proc.poll() is None and time.monotonic() < deadline, "predictor did not start"
            try:
                async with http.get(base + "/health") as r:
                    if r.status == 200 and (await r.json()).get("model_version") == version:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)

        rows = synthetic_window(100, seed=9).rows()  # the current feature schema's columns
        # as many bytes per request as ROWS rows of llm-d's 11 columns (NATS max payload)
        x = np.resize(rows, (ROWS * 11 // rows.shape[1], rows.shape[1]))
        payload = wire.encode_request(x)
        outstanding = 0
        answered = 0
        stop = asyncio.Event()

        async def flood() -> None:
            nonlocal outstanding, answered
            for _ in range(200):  # bounded in count and by ``stop``
                if stop.is_set():
                    return
                outstanding += 1
                try:
                    msg = await nc.request(names.predict, payload, timeout=30)
                    assert wire.decode_reply(msg.data).status == "ok"
                    answered += 1
                finally:
                    outstanding -= 1

        floods = [asyncio.create_task(flood()) for _ in range(8)]
        await asyncio.sleep(0.5)  # the backlog builds up
        latencies, backlog = [], []
        for _ in range(20):  # ~3 s of health checks during saturation
            backlog.append(outstanding)
            t0 = time.perf_counter()
            async with http.get(base + "/health") as r:
                assert r.status == 200 and (await r.json())["ready"] is True
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.15)
        async with http.get(base + "/metrics") as r:
            text = await r.text()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*floods), 60)

        calls = _metric(text, "headroom_predictor_predict_seconds_count")
        call_s = _metric(text, "headroom_predictor_predict_seconds_sum") / max(calls, 1)
        assert answered > 0 and calls > 0
        assert min(backlog) >= 1, "the predictor was not kept busy"
        # a blocked loop would answer after ~half a prediction call on average
        assert statistics.median(latencies) < call_s / 2, (latencies, call_s)
    finally:
        await http.close()
        await nc.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
