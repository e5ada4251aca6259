"""Trainer against real NATS JetStream and Redis: consume, window, fit, publish, announce."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import aiohttp
import orjson

from services.trainer.service import TrainerService
from services.trainer.settings import TrainerSettings
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import current_version, load_version
from shared.schemas import ModelAnnouncement, ModelMeta, TrainingSample
from shared.subjects import Names
from tests.unit.test_trainer_fitting import synthetic_sample


async def eventually(cond: Callable[[], object], within: float = 15.0, step: float = 0.05):
    """Poll ``cond`` (sync or async) until truthy; bounded in time."""
    deadline = time.monotonic() + within
    while True:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(step)


def trainer_settings(isolated: dict, **overrides) -> TrainerSettings:
    base = dict(
        nats_url=isolated["nats_url"],
        redis_url=isolated["redis_url"],
        namespace=isolated["namespace"],
        admin_port=0,
        min_samples=30,
        min_new_samples=10,
        interval_s=0.2,
        rounds=20,
        fetch_timeout_s=0.2,
    )
    return TrainerSettings(**{**base, **overrides})


async def publish_samples(js, names: Names, samples: list[TrainingSample]) -> None:
    for s in samples:
        await js.publish(names.samples(s.pool), s.encode(), headers={"Nats-Msg-Id": s.request_id})


def make_samples(n: int, seed: int = 5, prefix: str = "r") -> list[TrainingSample]:
    rng = random.Random(seed)
    return [synthetic_sample(rng, i, request_id=f"{prefix}{i}") for i in range(n)]


async def all_acked(js, names: Names) -> bool:
    info = await js.consumer_info(names.samples_stream, names.trainer_durable)
    return info.num_pending == 0 and info.num_ack_pending == 0


def metric(svc, name: str, **labels) -> float:
    v = svc.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if v is None else v


async def test_trainer_consumes_fits_publishes_and_announces(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    announced: list[ModelAnnouncement] = []

    async def on_announce(msg):
        announced.append(ModelAnnouncement.decode(msg.data))

    await nc.subscribe(names.model_announce, cb=on_announce)
    samples = make_samples(60)
    await publish_samples(js, names, samples)
    subject = names.samples("default")
    # Same request id under another message id: JetStream keeps it, the window must not.
    await js.publish(subject, samples[0].encode(), headers={"Nats-Msg-Id": "retry-of-r0"})
    # Malformed samples: counted by reason, never trained on.
    await js.publish(subject, b"not json", headers={"Nats-Msg-Id": "bad-1"})
    await js.publish(
        subject, orjson.dumps({"v": 1, "request_id": "x"}), headers={"Nats-Msg-Id": "bad-2"}
    )
    bad_row = {**samples[1].to_dict(), "request_id": "bad-3", "features": [1.0, 2.0]}
    await js.publish(subject, orjson.dumps(bad_row), headers={"Nats-Msg-Id": "bad-3"})

    svc = TrainerService(trainer_settings(isolated))
    await svc.start()
    try:
        await eventually(lambda: announced)
        assert announced[0].version == "v1"
        assert await current_version(r, names) == "v1"
        model = await load_version(r, names, "v1")
        meta: ModelMeta = model.meta
        assert meta.samples == 60
        assert set(meta.targets) == {"ttft", "tpot"}
        assert all(t["format"] == "ubj" for t in meta.targets.values())
        assert set(meta.metrics["ttft"]) >= {"mape", "mae", "holdout"}
        assert set(model.boosters) == {"ttft", "tpot"}

        assert len(svc.window) == 60
        assert metric(svc, "headroom_trainer_samples_received_total") == 60
        assert metric(svc, "headroom_trainer_window_size") == 60
        for reason in ("not_json", "missing_field", "bad_row", "duplicate"):
            assert metric(svc, "headroom_trainer_samples_rejected_total", reason=reason) == 1
        assert metric(svc, "headroom_trainer_fits_total", result="ok") == 1
        assert metric(svc, "headroom_trainer_model_version_info", version="v1") == 1
        assert metric(svc, "headroom_trainer_fit_seconds_count") == 1
        assert metric(svc, "headroom_trainer_model_mape", target="ttft") > 0

        # No new samples: the periodic check does not refit; a forced fit does.
        assert await svc.fit_now() is None
        assert await svc.fit_now(force=True) == "v2"
        await eventually(lambda: len(announced) == 2)
        assert announced[1].version == "v2"
        assert metric(svc, "headroom_trainer_model_version_info", version="v1") == 0

        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{svc.admin_port}"
            async with http.get(f"{base}/health") as resp:
                assert resp.status == 200
                body = await resp.json()
                assert body["ready"] and body["window"] == 60 and body["model_version"] == "v2"
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
                assert 'headroom_trainer_samples_rejected_total{reason="not_json"} 1.0' in text
    finally:
        await svc.stop()

    # Everything was acknowledged (malformed ones terminated): nothing left to redeliver.
    await eventually(lambda: all_acked(js, names))
    await nc.close()
    await r.aclose()


async def test_new_samples_trigger_refit_and_old_versions_are_dropped(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    svc = TrainerService(trainer_settings(isolated, keep_versions=2, window_size=50))
    await svc.start()
    try:
        await publish_samples(js, names, make_samples(40, seed=1, prefix="a"))
        await eventually(lambda: svc.last_version == "v1")
        # Fewer than min_new_samples new ones: no refit.
        await publish_samples(js, names, make_samples(5, seed=2, prefix="b"))
        await eventually(lambda: len(svc.window) == 45)
        assert await svc.fit_now() is None
        await publish_samples(js, names, make_samples(20, seed=3, prefix="c"))
        await eventually(lambda: svc.last_version == "v2")
        assert len(svc.window) == 50  # bounded: oldest out
        assert await svc.fit_now(force=True) == "v3"
        versions = [v.decode() for v in await r.lrange(names.model_versions, 0, -1)]
        assert versions == ["v3", "v2"]
        assert not await r.exists(names.model_blob("v1"))
    finally:
        await svc.stop()
        await nc.close()
        await r.aclose()


async def test_tpot_lagging_skips_the_fit_until_both_targets_have_enough(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    svc = TrainerService(trainer_settings(isolated, interval_s=30.0))
    await svc.start()
    try:
        # Single-token answers carry TTFT but no TPOT.
        one_token = [_single_token(s) for s in make_samples(40)]
        await publish_samples(js, names, one_token)
        await eventually(lambda: len(svc.window) == 40)
        assert await svc.fit_now(force=True) is None
        assert metric(svc, "headroom_trainer_fits_total", result="skipped") == 1
        assert await current_version(r, names) is None
        await publish_samples(js, names, make_samples(30, seed=9, prefix="t"))
        await eventually(lambda: len(svc.window) == 70)
        assert await svc.fit_now() == "v1"
        model = await load_version(r, names, "v1")
        assert model.meta.metrics["tpot"]["samples"] == 30
        assert model.meta.metrics["ttft"]["samples"] == 70
    finally:
        await svc.stop()
        await nc.close()
        await r.aclose()


def _single_token(s: TrainingSample) -> TrainingSample:
    d = s.to_dict()
    d.update(output_tokens=1, tpot_ms=None)
    return TrainingSample.from_dict(d)


async def test_restarted_trainer_refills_its_window_from_the_stream(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    samples = make_samples(60)
    await publish_samples(js, names, samples[:30])
    await js.publish(names.samples("default"), b"junk", headers={"Nats-Msg-Id": "junk"})
    await publish_samples(js, names, samples[30:])
    first = TrainerService(trainer_settings(isolated))
    await first.start()
    try:
        await eventually(lambda: first.last_version == "v1")
    finally:
        await first.stop()

    await eventually(lambda: all_acked(js, names))  # acks are asynchronous
    await publish_samples(js, names, make_samples(5, seed=8, prefix="late"))
    second = TrainerService(trainer_settings(isolated, window_size=50))
    await second.start()
    try:
        # The last 50 acknowledged stream messages (one of them junk) plus 5 new samples.
        assert metric(second, "headroom_trainer_samples_replayed_total") == 49
        await eventually(lambda: metric(second, "headroom_trainer_samples_received_total") == 5)
        assert len(second.window) == 50
        assert second.new_samples() == 5  # replayed samples do not count as new
        assert await second.fit_now() is None
        assert await second.fit_now(force=True) == "v2"
    finally:
        await second.stop()
    await eventually(lambda: all_acked(js, names))
    await nc.close()
