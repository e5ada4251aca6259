"""A worse candidate is not promoted: the current version stays, predictors keep serving it,
and the rejection is counted, logged and recorded in the Redis history (real NATS and Redis)."""

from __future__ import annotations

import logging

from services.predictor.service import PredictorService
from services.trainer.service import TrainerService
from shared.bus import connect_nats, connect_redis, ensure_samples_stream
from shared.model_store import current_version, kept_versions, read_history
from shared.subjects import Names
from tests.integration.trainer_harness import (
    eventually,
    make_samples,
    metric,
    predictor_settings,
    publish_samples,
    trainer_settings,
)


async def test_a_worse_candidate_is_not_promoted(isolated, caplog):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    r = connect_redis(isolated["redis_url"])
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    predictor = PredictorService(predictor_settings(isolated, "p0"))
    await predictor.start()
    strong = TrainerService(trainer_settings(isolated, rounds=150, interval_s=60.0))
    await strong.start()
    try:
        await publish_samples(js, names, make_samples(400, prefix="a", noise=0.05))
        await eventually(lambda: len(strong.window) == 400)
        assert await strong.fit_now() == "v1"
    finally:
        await strong.stop()
    await eventually(lambda: predictor.slot.version == "v1")

    # The same trainer restarted with a crippled fit (2 boosting rounds): its candidates are
    # far worse than v1 on the fresh samples neither has seen.
    weak = TrainerService(trainer_settings(isolated, rounds=2, interval_s=60.0, min_holdout=10))
    await weak.start()
    try:
        assert len(weak.window) == 400  # rebuilt from the stream
        await publish_samples(js, names, make_samples(200, prefix="b", seed=7, noise=0.05))
        await eventually(lambda: len(weak.window) == 600)
        with caplog.at_level(logging.WARNING, logger="services.trainer.service"):
            assert await weak.fit_now() is None
        result = weak.last_result
        assert result.decision == "reject" and result.compared_with == "v1"
        assert set(result.worse_keys) == {"ttft", "tpot"}
        assert result.holdout == 60  # 10% of the window, drawn from the 200 unseen samples
        assert await current_version(r, names) == "v1"
        assert await kept_versions(r, names) == ["v1"]
        assert metric(weak, "headroom_trainer_candidates_total", decision="reject") == 1
        assert metric(weak, "headroom_trainer_candidate_rejections_total", target="ttft") == 1
        assert metric(weak, "headroom_trainer_candidate_rejections_total", target="tpot") == 1
        assert metric(weak, "headroom_trainer_candidate_mape", target="ttft") > 0
        assert any("candidate rejected, keeping v1" in m for m in caplog.messages)
        record = (await read_history(r, names))[0]
        assert record["action"] == "reject" and record["current"] == "v1"
        assert record["reason"].startswith("worse: ttft mape")
        for key in ("ttft", "tpot"):
            cand, cur = record["candidate_metrics"][key], record["current_metrics"][key]
            assert cand["n"] == cur["n"] and cand["mape"] > cur["mape"]
        assert weak.health()["last_decision"]["decision"] == "reject"
        assert predictor.slot.version == "v1"
        assert weak.new_samples() == 0  # a rejected cycle does not retrigger at once
    finally:
        await weak.stop()
        await predictor.stop()
        await nc.close()
        await r.aclose()
