"""Redis restarts empty (it persists nothing): the predictors keep serving the last good
model, and the trainer writes the current version back under the same id (counter kept
ahead, announced, recorded), so a predictor that starts afterwards gets it too and the next
version id does not collide. Real NATS, a Redis started (and crashed) by the test."""

from __future__ import annotations

import pytest

from services.predictor.service import PredictorService
from services.trainer.service import TrainerService
from shared import embedded
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import current_version, next_version, read_history, read_version
from shared.subjects import Names
from tests.integration.trainer_harness import (
    eventually,
    make_samples,
    metric,
    predictor_settings,
    publish_samples,
    trainer_settings,
)

pytestmark = pytest.mark.timeout(120)


async def test_trainer_writes_the_current_model_back_after_redis_restarts_empty(isolated):
    names: Names = isolated["names"]
    redis = embedded.start_redis()  # its own: the test kills it
    own = {**isolated, "redis_url": redis.url}
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    announced: list[bytes] = []

    async def on_announce(msg) -> None:
        announced.append(msg.data)

    await nc.subscribe(names.model_announce, cb=on_announce)
    predictor = PredictorService(predictor_settings(own, "p0"))
    trainer = TrainerService(trainer_settings(own, interval_s=60.0, republish_check_s=0.2))
    late = None
    try:
        await predictor.start()
        await trainer.start()
        await publish_samples(js, names, make_samples(300, prefix="a"))
        await eventually(lambda: len(trainer.window) == 300)
        assert await trainer.fit_now() == "v1"
        await eventually(lambda: predictor.slot.version == "v1")
        r = connect_redis(redis.url)
        meta, blobs = await read_version(r, names, "v1")
        await r.aclose()

        redis.crash()  # kill -9: everything in it is gone
        redis.restart()
        # the predictor kept the model meanwhile; the trainer writes v1 back
        assert predictor.slot.version == "v1"
        r = connect_redis(redis.url)
        try:
            await eventually(lambda: current_version(r, names), within=30)
            assert await current_version(r, names) == "v1"
            meta2, blobs2 = await read_version(r, names, "v1")
            assert blobs2 == blobs and meta2.to_dict() == meta.to_dict()
            history = await read_history(r, names)
            assert history[0]["action"] == "republish" and history[0]["version"] == "v1"
            await eventually(lambda: metric(trainer, "headroom_trainer_model_republished_total"))
            assert metric(trainer, "headroom_trainer_model_republished_total") == 1
            await eventually(lambda: len(announced) >= 2)  # v1 at the fit, v1 again now
            # a predictor starting now (it never saw v1) loads it from the restarted Redis
            late = PredictorService(predictor_settings(own, "p1"))
            await late.start()
            assert late.slot.version == "v1"
            assert await next_version(r, names) == "v2"  # ids stay unique
        finally:
            await r.aclose()
        assert predictor.slot.version == "v1"
    finally:
        if late is not None:
            await late.stop()
        await trainer.stop()
        await predictor.stop()
        await nc.close()
        redis.stop()
