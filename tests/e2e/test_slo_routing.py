"""End to end: SLO headers change routing and a sheddable request that no pod can serve
within its SLO gets 503 (issue 4, done-means 1). Real processes through the launcher: two
simulated pods, collector, one predictor, trainer and the gateway with its default
`headroom` profile. A model version trained on synthetic rows is published to Redis before
the stack starts, so the predictors answer at once and their answers are known (the profile
ranks by its cost model and reads the predictions only to shed sheddable requests):

    TTFT = 100 ms + 0.1 ms x uncached prompt tokens + 50 ms x waiting requests
    TPOT = 5 ms + 0.004 ms x decode tokens in flight + 1 ms x running requests

(the trainer is told never to refit, so this model stays current).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from services.launcher import DEFAULT_MODEL
from shared.tokenizer import synth_text
from tests.e2e.conftest import metric_value, running_stack
from tests.e2e.synthetic_model import publish_synthetic_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PREFIX_TOKENS = 150 * 64  # whole 64-token blocks: the gateway's prefix score reaches 1.0
LONG_MAX_TOKENS = 4000  # keeps a pod decoding for well over the test's duration


@pytest.fixture(scope="module")
def slo_stack(infra):
    env = {
        "trainer": {"HEADROOM_TRAINER_MIN_SAMPLES": "1000000"},  # keep the synthetic model
        "predictor": {"HEADROOM_PREDICTOR_RELOAD_INTERVAL_S": "1"},
        "gateway": {"HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "1000"},
    }

    def setup(names):
        asyncio.run(publish_synthetic_model(infra["redis_url"], names))

    with running_stack(infra, "hrs", setup=setup, pods=2, predictors=1, env=env) as s:
        yield s


class Client:
    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def complete(self, prompt: str, headers: dict[str, str] | None = None,
                       max_tokens: int = 4) -> tuple[int, dict[str, str], dict]:  # fmt: skip
        body = {"model": DEFAULT_MODEL, "prompt": prompt, "max_tokens": max_tokens}
        async with self.session.post(f"{self.url}/v1/completions", json=body,
                                     headers=headers or {}) as r:  # fmt: skip
            data = await r.json(content_type=None)
            return r.status, {k.lower(): v for k, v in r.headers.items()}, data

    async def hold(self, prompt: str, started: asyncio.Queue) -> None:
        """A long streaming request: reports its pod once the first event arrived, then
        reads until cancelled."""
        body = {"model": DEFAULT_MODEL, "prompt": prompt, "max_tokens": LONG_MAX_TOKENS,
                "stream": True}  # fmt: skip
        async with self.session.post(f"{self.url}/v1/completions", json=body) as r:
            assert r.status == 200, await r.text()
            first = True
            async for _ in r.content:
                if first:
                    await started.put(r.headers["x-headroom-pod"])
                    first = False

    async def metrics(self) -> str:
        async with self.session.get(f"{self.url}/metrics") as r:
            return await r.text()


async def _pod_gauge(session, url: str, name: str) -> float:
    async with session.get(f"{url}/metrics") as r:
        return metric_value(await r.text(), name)


async def _until(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_slo_headers_change_routing_and_sheddable_requests_get_503(slo_stack):
    s = slo_stack
    timeout = aiohttp.ClientTimeout(total=120)
    holders: list[asyncio.Task] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        c = Client(session, s.gateway_url)
        try:
            await _run_scenario(s, c, session, holders)
        except BaseException:
            print("\n".join(s.logs[-80:]))
            raise
        finally:
            for t in holders:
                t.cancel()
            await asyncio.gather(*holders, return_exceptions=True)


async def _run_scenario(s, c: Client, session, holders: list[asyncio.Task]) -> None:
    prefix = synth_text(PREFIX_TOKENS, seed=11)

    # 0. the predictors answer (the model was pre-published): a sheddable request with a
    #    generous SLO is the one kind the profile asks them for; the cost model still ranks
    async def predicted() -> bool:
        generous = {"x-llm-d-slo-ttft-ms": "60000", "x-headroom-priority": "-1"}
        status, h, _ = await c.complete("warm up", generous)
        assert status == 200 and h["x-headroom-routing"] == "cost-model", h
        return bool(h.get("x-headroom-model-version"))

    await _until(predicted, 30, "the predictors' model")

    # 1. the prefix lands on pod X; three long decodes with that prefix stick to X
    status, h, _ = await c.complete(prefix + " start")
    assert status == 200
    x = h["x-headroom-pod"]
    y = next(p for p in s.pod_urls if p != x)
    started: asyncio.Queue = asyncio.Queue()
    for i in range(3):
        holders.append(asyncio.create_task(c.hold(f"{prefix} {synth_text(8, i)}", started)))
    pods = [await asyncio.wait_for(started.get(), 30) for _ in range(3)]
    assert pods == [x, x, x], pods

    async def x_busy() -> bool:  # the gateway sees X running them
        return await _pod_gauge(session, s.pod_urls[x], "vllm:num_requests_running") >= 3

    await _until(x_busy, 20, "X decoding")
    await asyncio.sleep(0.5)  # a scrape or two reach the gateway

    # 2. without SLO headers: X (the whole prefix is cached there: a much shorter prefill,
    #    and slowing its three decodes by that little costs less than a full prefill on Y)
    for i in range(2):
        status, h, _ = await c.complete(f"{prefix} {synth_text(6, 100 + i)}")
        assert status == 200 and h["x-headroom-routing"] == "cost-model"
        assert "x-headroom-model-version" not in h  # no prediction call for it
        assert h["x-headroom-pod"] == x, "without SLO headers the cached pod wins"

    # 3. with a TTFT SLO no pod can meet (5 ms) the request's own SLO is lost anyway: it goes
    #    to Y, where its prefill slows no decoding request (latency-cost-scorer's hopeless
    #    rule), although X holds its prefix. The rule only considers pods where its own TTFT
    #    is within hopelessMaxDelay (10x) of its best: 1,500 new tokens keep Y's full prefill
    #    within 7.4x of X's whatever the cost model learned (with 6 new tokens X's estimate is
    #    about the fixed cost alone, and a fast box that learns a small one puts Y beyond 10x)
    slo = {"x-llm-d-slo-ttft-ms": "5", "x-llm-d-slo-tpot-ms": "60"}
    chosen = []
    for i in range(3):
        status, h, _ = await c.complete(f"{prefix} {synth_text(1_500, 200 + i)}", slo)
        assert status == 200 and h["x-headroom-routing"] == "cost-model"
        chosen.append(h["x-headroom-pod"])
    assert chosen == [y, y, y], (chosen, x, y)

    # 4. load Y too (busy and warm), then a sheddable request with an SLO nobody meets
    for i in range(3):
        holders.append(asyncio.create_task(c.hold(synth_text(12_000, 300 + i), started)))
        if await asyncio.wait_for(started.get(), 30) == y:
            break
    else:
        raise AssertionError("no long request landed on Y")

    async def warm() -> bool:
        kv = [await _pod_gauge(session, u, "vllm:kv_cache_usage_perc") for u in s.pod_urls.values()]
        return min(kv) >= 0.022

    await _until(warm, 30, "both pods warm (KV >= 2%)")
    shed = {"x-llm-d-slo-ttft-ms": "50", "x-headroom-priority": "-1"}
    status = 0
    for _ in range(20):  # until the gateway's snapshot shows both pods warm
        status, h, body = await c.complete("hi", shed)
        if status == 503:
            break
        await asyncio.sleep(0.3)
    assert status == 503, body
    assert h["retry-after"] and h["content-type"].startswith("application/json")
    assert body["error"]["code"] == "slo_unattainable"
    assert "slo_unattainable" in body["error"]["message"]
    # at priority 0 it is served (best effort), here with an SLO it must miss
    status, _, _ = await c.complete("hi", {"x-llm-d-slo-ttft-ms": "1"})
    assert status == 200

    m = await c.metrics()
    assert metric_value(m, "headroom_gateway_requests_shed_total", reason="slo_unattainable") >= 1
    assert metric_value(m, "inference_objective_request_slo_violation_total", type="ttft") >= 1
    assert metric_value(m, "headroom_gateway_scheduler_plugin_duration_seconds_count",
                   plugin_type="predicted-latency-producer") >= 8  # fmt: skip
