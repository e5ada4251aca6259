"""End to end: the launcher's stack serves OpenAI traffic, learns, and switches to predicted
routing (issue 2, done-means 1 and 2)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request

import aiohttp
import openai
import pytest

from services.launcher import DEFAULT_MODEL
from shared.bus import connect_redis
from shared.model_store import current_version
from shared.tokenizer import synth_text
from tests.e2e.conftest import metric_value

pytestmark = pytest.mark.e2e


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_curl_style_completion(stack):
    body = json.dumps({"model": DEFAULT_MODEL, "prompt": "Say hello", "max_tokens": 8}).encode()
    req = urllib.request.Request(
        f"{stack.gateway_url}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        out = json.loads(r.read())
        pod = r.headers["x-headroom-pod"]
    assert out["object"] == "text_completion"
    assert out["choices"][0]["text"]
    assert out["usage"]["completion_tokens"] == 8
    assert pod in stack.pod_urls


async def test_openai_client_streaming_and_not(stack):
    client = openai.AsyncOpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused")
    try:
        models = await client.models.list()
        assert DEFAULT_MODEL in [m.id for m in models.data]
        # the pods' context length, read by the collector from their /v1/models (vLLM's
        # max_model_len field) and reported back by the gateway
        [model] = [m for m in models.data if m.id == DEFAULT_MODEL]
        assert model.model_extra.get("max_model_len") == 131_072
        with pytest.raises(openai.BadRequestError) as e:
            await client.completions.create(model=DEFAULT_MODEL, prompt="Hi", max_tokens=10**9)
        assert e.value.code == "context_length_exceeded" and "131072" in e.value.message

        c = await client.completions.create(model=DEFAULT_MODEL, prompt="Hi there", max_tokens=5)
        assert c.choices[0].text and c.usage.completion_tokens == 5

        chunks = []
        stream = await client.completions.create(
            model=DEFAULT_MODEL, prompt="Count to ten", max_tokens=6, stream=True
        )
        async for ch in stream:
            chunks.append(ch.choices[0].text if ch.choices else "")
        assert len([t for t in chunks if t]) == 6

        chat = await client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=4
        )
        assert chat.choices[0].message.content and chat.choices[0].message.role == "assistant"

        stream = await client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[{"role": "user", "content": "Hello again"}],
            max_tokens=4,
            stream=True,
        )
        deltas = [ch.choices[0].delta.content async for ch in stream if ch.choices]
        assert "".join(d for d in deltas if d)
    finally:
        await client.close()


async def _send(session, url, i, rng, results):
    # Shared system prefixes of different lengths so prefix affinity and prompt length vary.
    prefix = synth_text(rng.choice([50, 400, 1500]), seed=rng.randrange(3))
    body = {
        "model": DEFAULT_MODEL,
        "prompt": prefix + " " + synth_text(rng.randrange(10, 300), seed=i + 1000),
        "max_tokens": rng.choice([4, 8, 16, 32]),
        "stream": bool(i % 2),
    }
    async with session.post(f"{url}/v1/completions", json=body) as r:
        await r.read()
        results.append((r.status, r.headers.get("x-headroom-pod"),
                        r.headers.get("x-headroom-routing"),
                        r.headers.get("x-headroom-model-version")))  # fmt: skip


async def test_stack_learns_and_switches_to_predicted_routing(stack):
    rng = random.Random(7)
    results: list[tuple] = []
    deadline = time.monotonic() + 240
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        sem = asyncio.Semaphore(8)

        async def one(i):
            async with sem:
                await _send(session, stack.gateway_url, i, rng, results)

        # Phase 1: enough traffic to train a first model (bounded: 300 requests, 240 s).
        await asyncio.gather(*(one(i) for i in range(300)))
        r = connect_redis(stack.redis_url)
        try:
            version = None
            while version is None and time.monotonic() < deadline:
                version = await current_version(r, stack.names)
                await asyncio.sleep(0.5)
        finally:
            await r.aclose()
        assert version, "no model version appeared in Redis\n" + "\n".join(stack.logs[-60:])

        # Phase 2: once the predictors have the model, routing switches to predicted.
        later: list[tuple] = []
        for batch in range(20):
            if time.monotonic() > deadline:
                break
            await asyncio.gather(*(one(1000 + batch * 20 + j) for j in range(20)))
            later = results[-20:]
            if sum(1 for x in later if x[2] == "predicted") >= 10:
                break

    assert all(status == 200 for status, *_ in results), {s for s, *_ in results}
    samples = metric_value(_get(stack.admin_urls["trainer"] + "/metrics"),
                      "headroom_trainer_samples_received_total")  # fmt: skip
    assert samples >= 250, samples
    for i in range(stack.config.predictors):
        health = json.loads(_get(stack.admin_urls[f"predictor-{i}"] + "/health"))
        assert health.get("model_version"), health
    predicted = [x for x in later if x[2] == "predicted"]
    assert len(predicted) >= 10, later
    assert all(x[3] for x in predicted)
    gw_metrics = _get(stack.gateway_url + "/metrics")
    assert metric_value(gw_metrics, "headroom_gateway_routing_total", path="predicted") >= 10
    assert metric_value(gw_metrics, "headroom_gateway_routing_total", path="fallback") >= 1
    pods = {pod for _, pod, *_ in results}
    assert len(pods) >= 3, pods
