"""Predictors against real NATS and Redis: queue group, hot reload, refusing bad versions on
every replica, rollback reaching every replica within seconds."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import nats.errors
import numpy as np
import pytest

from services import model_cli
from services.predictor.service import PredictorService
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from services.trainer.service import TrainerService
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.features import FEATURES
from shared.model_store import load_version, next_version, publish_version
from shared.schemas import ModelAnnouncement, PredictReply, PredictRequest
from shared.subjects import Names
from tests.integration.trainer_harness import (
    eventually,
    make_samples,
    metric,
    predictor_settings,
    publish_samples,
    trainer_settings,
)
from tests.unit.trainer_synth import synthetic_samples, synthetic_window

ROWS = synthetic_window(20, seed=11).rows().tolist()


async def predict(nc, names: Names, rows=ROWS) -> PredictReply:
    # a replica that has just subscribed may not be routed to yet (tests/integration/nats_routing.py)
    deadline = time.monotonic() + 5.0
    while True:
        try:
            msg = await nc.request(names.predict, PredictRequest(rows=rows).encode(), timeout=5.0)
            return PredictReply.decode(msg.data)
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.005)


async def publish_model(
    r, nc, names: Names, *, corrupt: str | None = None, announce: bool = True, seed: int = 1
):
    """Fit a tiny model in the test and publish it as the next version; ``corrupt`` breaks it
    after storing: "checksum" (a blob byte flipped in Redis) or "schema" (feature schema)."""
    cfg = FitConfig(rounds=5)
    data = TrainingData.from_samples(synthetic_samples(40, seed=seed, prefix=f"m{seed}-"))
    version = await next_version(r, names)
    meta, blobs = build_meta(version, 1.0, run_cycle(data, None, cfg), cfg)
    if corrupt == "schema":
        meta.feature_schema = 99
    await publish_version(r, names, meta, blobs)
    if corrupt == "checksum":
        blob = await r.hget(names.model_blob(version), "ttft")
        await r.hset(names.model_blob(version), "ttft", blob[:-1] + bytes([blob[-1] ^ 0xFF]))
    if announce:
        await nc.publish(names.model_announce, ModelAnnouncement(version, 1.0).encode())
        await nc.flush()
    return version


async def test_two_replicas_not_ready_then_serve_the_trainers_model(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    predictors = [
        PredictorService(predictor_settings(isolated, f"rep-{i}", reload_interval_s=30.0))
        for i in range(2)
    ]
    for p in predictors:
        await p.start()
    trainer = TrainerService(trainer_settings(isolated))
    try:
        reply = await predict(nc, names)
        assert reply.status == "not_ready" and reply.model_version is None

        await trainer.start()
        await publish_samples(js, names, make_samples(50))
        # Announced, so loaded without waiting for the (long) periodic check or a restart.
        await eventually(lambda: all(p.slot.version == "v1" for p in predictors))

        replicas = set()
        for _ in range(40):
            reply = await predict(nc, names)
            assert reply.status == "ok", reply.error
            assert reply.model_version == "v1"
            assert len(reply.ttft_ms) == len(reply.tpot_ms) == len(ROWS)
            replicas.add(reply.replica)
        assert replicas == {"rep-0", "rep-1"}  # the queue group shares the load

        for p in predictors:
            assert metric(p, "headroom_predictor_model_loads_total", result="ok") == 1
            assert metric(p, "headroom_predictor_model_info", version="v1") == 1
        total_ok = sum(
            metric(p, "headroom_predictor_requests_total", status="ok") for p in predictors
        )
        assert total_ok == 40
        rows = sum(metric(p, "headroom_predictor_rows_total") for p in predictors)
        assert rows == 40 * len(ROWS)
    finally:
        await trainer.stop()
        for p in predictors:
            await p.stop()
        await nc.close()


async def test_missed_announcement_bad_checksum_and_bad_requests(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    p = PredictorService(predictor_settings(isolated, "solo"))
    await p.start()
    try:
        # Published without an announcement: the periodic check finds it.
        v1 = await publish_model(r, nc, names, announce=False)
        await eventually(lambda: p.slot.version == v1)

        # A version whose blob fails its checksum is refused; v1 keeps serving.
        v2 = await publish_model(r, nc, names, corrupt="checksum")
        await eventually(
            lambda: metric(p, "headroom_predictor_model_loads_total", result="refused") >= 1
        )
        assert p.refused == {v2: "checksum"}
        reply = await predict(nc, names)
        assert reply.status == "ok" and reply.model_version == v1
        # Refused once, not retried on every periodic check (current still points at v2).
        await p.check_current()
        assert metric(p, "headroom_predictor_model_loads_total", result="refused") == 1

        # Malformed requests get an error reply, counted by reason; the service keeps going.
        msg = await nc.request(names.predict, b"{", timeout=5.0)
        bad = PredictReply.decode(msg.data)
        assert bad.status == "error" and bad.replica == "solo"
        msg = await nc.request(names.predict, b'{"v":1,"rows":[[1,2]]}', timeout=5.0)
        assert PredictReply.decode(msg.data).status == "error"
        assert metric(p, "headroom_predictor_request_errors_total", reason="not_json") == 1
        assert metric(p, "headroom_predictor_request_errors_total", reason="bad_row") == 1

        # Announcements only say "current moved": an older or garbage one changes nothing.
        v3 = await publish_model(r, nc, names)
        await eventually(lambda: p.slot.version == v3)
        await nc.publish(names.model_announce, ModelAnnouncement(v1, 1.0).encode())
        await nc.publish(names.model_announce, b"garbage")
        await nc.flush()
        loads = metric(p, "headroom_predictor_model_loads_total", result="ok")
        await asyncio.sleep(0.3)  # give a wrong reload the chance to happen
        assert metric(p, "headroom_predictor_model_loads_total", result="ok") == loads
        reply = await predict(nc, names, rows=[[0.0] * len(FEATURES)])
        assert reply.status == "ok" and reply.model_version == v3

        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{p.admin_port}"
            async with http.get(f"{base}/health") as resp:
                assert resp.status == 200
                assert await resp.json() == {"ready": True, "model_version": v3, "replica": "solo"}
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
                assert f'headroom_predictor_model_info{{version="{v3}"}} 1.0' in text
                assert 'headroom_predictor_model_loads_total{result="refused"} 1.0' in text
                assert "headroom_predictor_predict_seconds_bucket" in text
    finally:
        await p.stop()
        await nc.close()
        await r.aclose()


async def test_loads_the_current_version_at_start(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    try:
        v1 = await publish_model(r, nc, names, announce=False)
        p = PredictorService(predictor_settings(isolated, "late", reload_interval_s=30.0))
        await p.start()
        try:
            assert p.slot.version == v1  # before the first request, no waiting
            # its fast inference was built at load (in a thread), not by the first request
            assert p.handler.compiled(p.slot.model) is p.handler._compiled[0]
            assert len(p.handler._compiled) == 1
            reply = await predict(nc, names)
            assert reply.status == "ok" and reply.model_version == v1
        finally:
            await p.stop()
    finally:
        await nc.close()
        await r.aclose()


async def start_replicas(isolated: dict, n: int, **overrides) -> list[PredictorService]:
    replicas = [PredictorService(predictor_settings(isolated, f"rep-{i}", **overrides))
                for i in range(n)]  # fmt: skip
    for p in replicas:
        await p.start()
    return replicas


async def answered_by_every_replica(nc, names: Names, n: int, tries: int = 60) -> dict:
    """replica -> model versions seen in its replies (bounded number of requests)."""
    seen: dict[str, set] = {}
    for _ in range(tries):
        reply = await predict(nc, names)
        assert reply.status == "ok", reply.error
        seen.setdefault(reply.replica, set()).add(reply.model_version)
        if len(seen) == n:
            break
    return seen


@pytest.mark.parametrize(
    ("corrupt", "reason"), [("checksum", "checksum"), ("schema", "feature_schema")]
)
async def test_a_corrupted_version_is_refused_by_every_replica(isolated, corrupt, reason):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    replicas = await start_replicas(isolated, 3)
    try:
        v1 = await publish_model(r, nc, names)
        await eventually(lambda: all(p.slot.version == v1 for p in replicas))
        bad = await publish_model(r, nc, names, corrupt=corrupt, seed=2)
        await eventually(lambda: all(bad in p.refused for p in replicas))
        for p in replicas:
            assert p.refused[bad] == reason
            assert p.slot.version == v1  # the last good model stays in service
            assert metric(p, "headroom_predictor_model_refusals_total", reason=reason) == 1
            assert metric(p, "headroom_predictor_model_info", version=v1) == 1
        await asyncio.sleep(0.5)  # several periodic checks: refused once, not retried
        for p in replicas:
            assert metric(p, "headroom_predictor_model_loads_total", result="refused") == 1
        seen = await answered_by_every_replica(nc, names, 3)
        assert seen == {f"rep-{i}": {v1} for i in range(3)}
    finally:
        for p in replicas:
            await p.stop()
        await nc.close()
        await r.aclose()


async def test_rollback_switches_every_replica_within_5_seconds(isolated, monkeypatch):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    # A long periodic check: the switch must come from the rollback's announcement.
    replicas = await start_replicas(isolated, 3, reload_interval_s=30.0)
    try:
        v1 = await publish_model(r, nc, names)
        v2 = await publish_model(r, nc, names, seed=2)
        await eventually(lambda: all(p.slot.version == v2 for p in replicas))
        monkeypatch.setenv("HEADROOM_REDIS_URL", isolated["redis_url"])
        monkeypatch.setenv("HEADROOM_NATS_URL", isolated["nats_url"])
        monkeypatch.setenv("HEADROOM_NAMESPACE", names.namespace)
        started = time.monotonic()
        assert await asyncio.to_thread(model_cli.main, ["rollback", v1]) == 0
        await eventually(lambda: all(p.slot.version == v1 for p in replicas), within=5.0)
        assert time.monotonic() - started <= 5.0
        seen = await answered_by_every_replica(nc, names, 3)
        assert seen == {f"rep-{i}": {v1} for i in range(3)}
        # And forward again: rolling "back" to the newer kept version works the same way.
        assert await asyncio.to_thread(model_cli.main, ["rollback", v2]) == 0
        await eventually(lambda: all(p.slot.version == v2 for p in replicas), within=5.0)
    finally:
        for p in replicas:
            await p.stop()
        await nc.close()
        await r.aclose()


async def test_rollback_reaches_replicas_that_missed_the_announcement(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    replicas = await start_replicas(isolated, 2)
    try:
        v1 = await publish_model(r, nc, names)
        await publish_model(r, nc, names, seed=2)
        await eventually(lambda: all(p.slot.version == "v2" for p in replicas))
        argv = ["--redis-url", isolated["redis_url"], "--namespace", names.namespace,
                "--nats-url", "nats://127.0.0.1:1", "rollback", v1]  # fmt: skip
        assert await asyncio.to_thread(model_cli.main, argv) == 0  # NATS down: not announced
        await eventually(lambda: all(p.slot.version == v1 for p in replicas), within=5.0)
    finally:
        for p in replicas:
            await p.stop()
        await nc.close()
        await r.aclose()


async def test_a_lone_request_is_answered_inline_and_a_burst_is_batched(isolated):
    """A request that finds nothing queued is answered in its own callback (the batch task
    is not needed for it); requests that arrive while one is being predicted are queued and
    predicted together in one call."""
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    p = PredictorService(predictor_settings(isolated, "inline", reload_interval_s=30.0))
    try:
        v1 = await publish_model(r, nc, names, announce=False)
        await p.start()
        batch_task = p._batch_task
        batch_task.cancel()  # only the inline path is left
        with pytest.raises(asyncio.CancelledError):
            await batch_task
        for _ in range(3):
            reply = await predict(nc, names)
            assert reply.status == "ok" and reply.model_version == v1
        assert metric(p, "headroom_predictor_batch_requests_count") == 3

        p._batch_task = asyncio.create_task(p._batch_loop())
        real = p.handler.run_batch
        sizes: list[int] = []

        def slow(jobs, model=None):  # a first lone call holds the loop: the others queue
            sizes.append(len(jobs))
            if len(sizes) == 1:
                time.sleep(0.2)
            return real(jobs, model)

        p.handler.run_batch = slow
        replies = await asyncio.gather(*(predict(nc, names) for _ in range(6)))
        assert all(x.status == "ok" for x in replies)
        assert sum(sizes) == 6 and max(sizes) > 1, sizes  # some were predicted together
    finally:
        await p.stop()
        await nc.close()
        await r.aclose()


async def test_a_corrected_estimate_travels_from_the_trainer_to_every_serving_path(isolated):
    """HEADROOM_TRAINER_TTFT_BASE=estimate through the real services: the trainer's version
    says so in Redis, and the predictor's answers over NATS add the estimate's margin exactly
    as the version loaded here does (rows of one request go to the forest, a batch to
    XGBoost)."""
    names: Names = isolated["names"]
    estimate = FEATURES.index("estimate_ms")
    samples = make_samples(60, seed=9)
    for s in samples:  # TTFT ~ 1.5x the analytic estimate, which the rows now carry
        s.features[estimate] = s.ttft_ms / 1.5
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    r = await connect_redis(isolated["redis_url"])
    predictor = PredictorService(predictor_settings(isolated, "rep-0", reload_interval_s=30.0))
    trainer = TrainerService(trainer_settings(isolated, ttft_base="estimate"))
    await predictor.start()
    await trainer.start()
    try:
        await publish_samples(js, names, samples)
        await eventually(lambda: predictor.slot.version == "v1")
        model = await load_version(r, names, "v1")
        assert model.meta.targets["ttft"]["base"] == "estimate"
        assert model.meta.params["ttft_base"] == "estimate"
        far = [list(s.features) for s in samples[:40]]
        for row in far:
            row[estimate] *= 20.0  # far beyond every estimate the model was fitted on
        for rows in (far[:1], far):
            reply = await predict(nc, names, rows)
            assert reply.status == "ok" and reply.model_version == "v1", reply.error
            x = np.asarray(rows, dtype=np.float64)
            want = model.predict_key("ttft", x).astype(np.float32)
            assert np.array_equal(np.asarray(reply.ttft_ms, np.float32), want)
        # each prediction follows its estimate (20x the sample's) far beyond the fitted range
        assert all(p > 10.0 * s.ttft_ms for p, s in zip(reply.ttft_ms, samples, strict=False))
    finally:
        await trainer.stop()
        await predictor.stop()
        await r.aclose()
        await nc.close()
