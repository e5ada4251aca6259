"""Helpers for trainer and predictor integration tests (real NATS JetStream and Redis)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from services.predictor.settings import PredictorSettings
from services.trainer.settings import TrainerSettings
from shared.schemas import TrainingSample
from shared.subjects import Names
from tests.unit.trainer_synth import synthetic_sample


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
        min_holdout=3,
        interval_s=0.2,
        rounds=20,
        fetch_timeout_s=0.2,
    )
    return TrainerSettings(**{**base, **overrides})


def predictor_settings(isolated: dict, replica: str, **overrides) -> PredictorSettings:
    base = dict(
        nats_url=isolated["nats_url"],
        redis_url=isolated["redis_url"],
        namespace=isolated["namespace"],
        admin_port=0,
        replica_id=replica,
        reload_interval_s=0.2,
    )
    return PredictorSettings(**{**base, **overrides})


def make_samples(n: int, seed: int = 5, prefix: str = "r", **kw) -> list[TrainingSample]:
    """Samples stamped now (later batches are newer than earlier ones)."""
    rng = random.Random(seed)
    base = time.time()
    return [
        synthetic_sample(rng, i, request_id=f"{prefix}{i}", ts=base + i * 1e-6, **kw)
        for i in range(n)
    ]


async def publish_samples(js, names: Names, samples: list[TrainingSample]) -> None:
    for s in samples:
        await js.publish(names.samples(s.pool), s.encode(), headers={"Nats-Msg-Id": s.request_id})


async def all_acked(js, names: Names) -> bool:
    info = await js.consumer_info(names.samples_stream, names.trainer_durable)
    return info.num_pending == 0 and info.num_ack_pending == 0


def metric(svc, name: str, **labels) -> float:
    v = svc.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if v is None else v
