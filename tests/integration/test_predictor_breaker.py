"""The predictor client's circuit breaker against real NATS and a real predictor process that
is frozen (SIGSTOP) and thawed (SIGCONT): after the first timeouts calls are skipped at once
(reason ``circuit_open``, nothing sent), a background probe finds the predictor again, and
calls go through once more. The breaker's state is in the gateway's metrics."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.gateway.breaker import BreakerConfig
from services.gateway.predictor_client import PredictorClient
from shared.bus import connect_nats
from shared.features import FEATURES
from tests.integration.nats_routing import until_routed
from tests.integration.service_process import spawn, terminate

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 1.0  # a deadline no loaded box misses while the predictor runs


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def wait_until(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_frozen_predictor_is_skipped_then_found_again(isolated):
    names = isolated["names"]
    proc = await spawn(
        "services.predictor",
        {
            "HEADROOM_NATS_URL": isolated["nats_url"],
            "HEADROOM_REDIS_URL": isolated["redis_url"],
            "HEADROOM_NAMESPACE": names.namespace,
            "HEADROOM_PREDICTOR_ADMIN_PORT": "0",
            "HEADROOM_PREDICTOR_REPLICA_ID": "frozen-0",
        },
    )
    nc = await connect_nats(isolated["nats_url"], "breaker-test")
    registry = CollectorRegistry()
    client = PredictorClient(
        nc, names.predict, TIMEOUT_S, registry=registry,
        breaker=BreakerConfig(failures=3, open_s=0.5, max_open_s=1.0),
    )  # fmt: skip
    rows = np.zeros((3, len(FEATURES)), dtype=np.float32)
    frozen = False
    try:
        await until_routed(nc, names.predict, timeout_s=60)
        # no model in Redis: the predictor answers not_ready, which is an answer (success)
        assert (await client.predict(rows)).reason == "no_model"

        proc.send_signal(signal.SIGSTOP)
        frozen = True
        reasons = [(await client.predict(rows)).reason for _ in range(3)]
        assert reasons == ["timeout"] * 3  # the first timeouts: each waits its deadline
        metrics = generate_latest(registry).decode()
        assert sample(metrics, "headroom_gateway_predictor_circuit", state="open") == 1.0

        t0 = time.perf_counter()
        skipped = [(await client.predict(rows)).reason for _ in range(200)]
        took = time.perf_counter() - t0
        assert set(skipped) == {"circuit_open"}
        assert took < TIMEOUT_S  # 200 calls in less than one deadline: none waited for it

        # probes keep failing while frozen (each in the background)
        async def probed_twice() -> bool:
            await client.predict(rows)
            text = generate_latest(registry).decode()
            return sample(text, "headroom_gateway_predict_probes_total", result="timeout") >= 2

        await wait_until(probed_twice, 30, "two failed probes")
        assert (await client.predict(rows)).reason == "circuit_open"

        proc.send_signal(signal.SIGCONT)
        frozen = False

        async def closed() -> bool:
            return (await client.predict(rows)).reason == "no_model"

        await wait_until(closed, 30, "the breaker to close after the predictor thawed")
        text = generate_latest(registry).decode()
        assert sample(text, "headroom_gateway_predictor_circuit", state="closed") == 1.0
        assert sample(text, "headroom_gateway_predictor_circuit_transitions_total",
                      state="closed") == 1.0  # fmt: skip
        assert sample(text, "headroom_gateway_predict_skipped_total") >= 200
        # skipped calls never reached NATS: only the 3 timeouts (+ the first call and the
        # closing one) were sent as batches; probes are counted apart
        assert sample(text, "headroom_gateway_predict_batches_total", result="timeout") == 3
    finally:
        if frozen:
            proc.send_signal(signal.SIGCONT)
        await client.close()
        await nc.close()
        with contextlib.suppress(ProcessLookupError):
            await terminate(proc, "predictor")
