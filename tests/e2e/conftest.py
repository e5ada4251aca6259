"""A whole stack started through the same launcher `make up` uses, in a unique namespace."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from services.launcher import Stack, StackConfig
from shared import embedded
from shared.subjects import Names
from tests.conftest import _cleanup


@pytest.fixture(scope="module")
def stack(infra):
    names = Names(f"hre-{uuid.uuid4().hex[:10]}")
    logs: list[str] = []
    config = StackConfig(
        nats_url=infra["nats_url"],
        redis_url=infra["redis_url"],
        namespace=names.namespace,
        gateway_port=embedded.free_port(),
        pods=4,
        predictors=2,
        env={
            "trainer": {
                "HEADROOM_TRAINER_INTERVAL_S": "1.5",
                "HEADROOM_TRAINER_MIN_SAMPLES": "60",
                "HEADROOM_TRAINER_MIN_NEW_SAMPLES": "20",
                "HEADROOM_TRAINER_ROUNDS": "60",
            },
            "predictor": {"HEADROOM_PREDICTOR_RELOAD_INTERVAL_S": "1"},
            # A loaded 2-core CI box: give predictions room so routing is observable.
            "gateway": {"HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "500"},
        },
    )
    s = Stack(config, log=logs.append)
    try:
        s.start()
    except Exception:
        print("\n".join(logs[-200:]))
        raise
    s.names = names  # type: ignore[attr-defined]
    s.logs = logs  # type: ignore[attr-defined]
    yield s
    s.stop()
    asyncio.run(_cleanup(infra, names))
