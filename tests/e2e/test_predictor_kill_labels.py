"""Regression for issue 16's predictor-kill question: with both predictors killed (kill -9)
during traffic, did `x-headroom-routing: predicted` lie, or did the fault not take effect?

Reproduced (docs/benchmarks.md "Faults"): on a stack of its own the label is honest; every
request after the kill says `fallback` and `no_responders` is counted. The hand-run result
(1,799 of 1,800 `predicted`, no `no_responders`) is what a stack gets when other predictors
answer in its namespace on the same NATS, as two stacks in the default namespace on the
machine's shared NATS do: the fault did not take effect, since somebody else's predictors
were still answering. The launcher now refuses to start in a namespace that another stack
uses on that NATS.
"""

from __future__ import annotations

import asyncio
import os
import signal

import aiohttp
import pytest

from services.launcher import DEFAULT_MODEL, Stack, StackConfig, StackError
from services.predictor.service import PredictorService
from services.predictor.settings import PredictorSettings
from shared import embedded
from tests.e2e.conftest import metric_value, running_stack
from tests.e2e.synthetic_model import publish_synthetic_model
from tests.integration.nats_routing import until_routed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


async def _complete(session: aiohttp.ClientSession, url: str, i: int) -> tuple[int, dict]:
    body = {"model": DEFAULT_MODEL, "prompt": f"request {i} says hello", "max_tokens": 4,
            "stream": bool(i % 2)}  # fmt: skip
    async with session.post(f"{url}/v1/completions", json=body) as r:
        await r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}


def test_killed_predictors_never_label_a_request_predicted(infra):
    env = {
        "trainer": {"HEADROOM_TRAINER_MIN_SAMPLES": "1000000"},  # keep the synthetic model
        # a profile that ranks by the predictions (headroom does not ask for them)
        "gateway": {
            "HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "1000",
            "HEADROOM_GATEWAY_PROFILE": "llmd-predicted",
        },
    }

    def setup(names):
        asyncio.run(publish_synthetic_model(infra["redis_url"], names))

    with running_stack(infra, "hrk", setup=setup, pods=2, predictors=2, env=env) as stack:

        async def scenario() -> None:
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(timeout=timeout) as s:
                before = [await _complete(s, stack.gateway_url, i) for i in range(10)]
                assert all(st == 200 for st, _ in before)
                assert all(h["x-headroom-routing"] == "predicted" for _, h in before), before

                for name in ("predictor-0", "predictor-1"):
                    ch = stack.child(name)
                    os.kill(ch.proc.pid, signal.SIGKILL)
                    ch.proc.wait()
                after = [await _complete(s, stack.gateway_url, 100 + i) for i in range(30)]
                async with s.get(stack.gateway_url + "/metrics") as r:
                    metrics = await r.text()
            assert all(st == 200 for st, _ in after), after
            paths = [h["x-headroom-routing"] for _, h in after]
            assert paths == ["fallback"] * 30, paths
            reasons = [h["x-headroom-fallback-reason"] for _, h in after]
            # the server may route a request or two to a connection it has not yet seen
            # close: those time out (1 s here); every other one is "no responders"
            assert set(reasons) <= {"no_responders", "timeout", "circuit_open"}, reasons
            assert reasons.count("no_responders") >= 25, reasons
            assert "x-headroom-predicted-ttft-ms" not in after[-1][1]
            counted = metric_value(metrics, "headroom_gateway_routing_total", path="fallback")
            assert counted == 30, metrics
            assert metric_value(metrics, "headroom_gateway_routing_total", path="fallback",
                                reason="no_responders") == reasons.count("no_responders")  # fmt: skip

        asyncio.run(scenario())


async def test_launcher_refuses_a_namespace_another_stack_uses(isolated):
    """Predictors of another stack answer in this namespace: no second stack starts there."""
    other = PredictorService(
        PredictorSettings(
            nats_url=isolated["nats_url"], redis_url=isolated["redis_url"],
            namespace=isolated["namespace"], admin_port=0, replica_id="other-stack-0",
        )
    )  # fmt: skip
    await other.start()
    try:
        await until_routed(other._nc, isolated["names"].predict)
        stack = Stack(
            StackConfig(
                nats_url=isolated["nats_url"], redis_url=isolated["redis_url"],
                namespace=isolated["namespace"], gateway_port=embedded.free_port(), pods=1,
                predictors=1,
            ),
            log=lambda line: None,
        )  # fmt: skip
        with pytest.raises(StackError, match="already in use") as e:
            await asyncio.to_thread(stack.start)
        assert isolated["namespace"] in str(e.value) and "HEADROOM_NAMESPACE" in str(e.value)
        assert not stack.children  # refused before anything started
    finally:
        await other.stop()
