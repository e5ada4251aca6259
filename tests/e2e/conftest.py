"""Whole stacks started through the same launcher `make up` uses, each in a unique namespace."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from services.launcher import Stack, StackConfig
from shared import embedded
from shared.subjects import Names
from tests.conftest import _cleanup


@contextmanager
def running_stack(
    infra: dict, prefix: str, *, setup: Callable[[Names], None] | None = None, **config
) -> Iterator[Stack]:
    """Start a stack (free gateway port, namespace ``{prefix}-<uuid>``); ``setup(names)``
    runs first (e.g. to publish a model). Logs go to ``stack.logs``; the namespace's stream
    and keys are removed afterwards. Services that exit stay down (``restart=False``, what
    `headroom up --no-restart` does) unless the caller asks for restarts: a crash fails the
    test instead of being restarted behind its back."""
    config.setdefault("restart", False)
    names = Names(f"{prefix}-{uuid.uuid4().hex[:10]}")
    logs: list[str] = []
    try:
        if setup is not None:
            setup(names)
        s = Stack(
            StackConfig(
                nats_url=infra["nats_url"],
                redis_url=infra["redis_url"],
                namespace=names.namespace,
                gateway_port=embedded.free_port(),
                **config,
            ),
            log=logs.append,
        )
        s.names = names  # type: ignore[attr-defined]
        s.logs = logs  # type: ignore[attr-defined]
        try:
            s.start()
        except Exception:
            print("\n".join(logs[-200:]))
            raise
        try:
            yield s
        finally:
            s.stop()
    finally:
        asyncio.run(_cleanup(infra, names))


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples (Prometheus text) whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^\s{#]+)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        if all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            total += float(m.group(3))
    return total


@pytest.fixture(scope="module")
def stack(infra):
    env = {
        "trainer": {
            "HEADROOM_TRAINER_INTERVAL_S": "1.5",
            "HEADROOM_TRAINER_MIN_SAMPLES": "60",
            "HEADROOM_TRAINER_MIN_NEW_SAMPLES": "20",
            "HEADROOM_TRAINER_ROUNDS": "60",
        },
        "predictor": {"HEADROOM_PREDICTOR_RELOAD_INTERVAL_S": "1"},
        # A loaded 2-core CI box: give predictions room so routing is observable.
        # llmd-predicted: its scorer reads the predictions, so the switch to predicted
        # routing shows in x-headroom-routing (headroom ranks by its cost model)
        "gateway": {
            "HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "500",
            "HEADROOM_GATEWAY_PROFILE": "llmd-predicted",
        },
    }
    with running_stack(infra, "hre", pods=4, predictors=2, env=env) as s:
        yield s
