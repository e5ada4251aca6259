"""Gateway against real simulator pods and real NATS: completions and chat, streaming and
not, the official openai client, /v1/models, /health, /metrics."""

from __future__ import annotations

import orjson
import pytest
from openai import AsyncOpenAI

from tests.integration.gateway_harness import MODEL, gateway_stack, metric, wait_for

pytestmark = pytest.mark.timeout(60)


def text_of(events, kind):
    out = []
    for e in events:
        if isinstance(e, dict):
            for c in e.get("choices") or ():
                out.append(
                    c.get("text") if kind == "cmpl" else (c.get("delta") or {}).get("content")
                )
    return "".join(x for x in out if x)


async def test_completions_and_chat_streaming_and_not(isolated):
    async with gateway_stack(isolated) as st:
        await st.snapshot()
        pods = {p.name for p in st.pods}

        status, h, body = await st.post("/v1/completions",
                                        {"model": MODEL, "prompt": "Hello there", "max_tokens": 5})  # fmt: skip
        assert status == 200, body
        assert h["x-headroom-pod"] in pods and len(h["x-request-id"]) == 32
        # the default profile ranks by its cost model and asks no predictor (none runs)
        assert h["x-headroom-routing"] == "cost-model"
        assert "x-headroom-fallback-reason" not in h
        assert "x-headroom-model-version" not in h
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] and body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 5

        msgs = [{"role": "user", "content": "Say something"}]
        status, h, body = await st.post("/v1/chat/completions",
                                        {"model": MODEL, "messages": msgs, "max_tokens": 4})  # fmt: skip
        assert status == 200, body
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] == 4

        # streaming completions: chunks, no usage chunk unless asked, [DONE] at the end
        status, h, events = await st.stream(
            "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 6, "stream": True}
        )
        assert status == 200 and h["content-type"].startswith("text/event-stream")
        assert events[-1] == "[DONE]"
        assert not any(isinstance(e, dict) and "usage" in e for e in events)
        assert text_of(events, "cmpl")

        status, h, events = await st.stream(
            "/v1/chat/completions",
            {"model": MODEL, "messages": msgs, "max_tokens": 6, "stream": True,
             "stream_options": {"include_usage": True}},
        )  # fmt: skip
        assert status == 200 and events[-1] == "[DONE]"
        usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
        assert len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == 6
        assert text_of(events, "chat")

        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_total", endpoint="/v1/completions",
                      status="200") == 2  # fmt: skip
        assert metric(m, "headroom_gateway_routing_total", path="cost-model", reason="ok") == 4
        assert metric(m, "headroom_gateway_predict_seconds_count") == 0  # never asked
        assert metric(m, "inference_objective_request_ttft_seconds_count", model_name=MODEL) == 4
        assert metric(m, "inference_objective_request_tpot_seconds_count", model_name=MODEL) == 4
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="in-flight drained")
        assert all(st.gw.view.in_flight(p) == (0, 0.0, 0.0) for p in pods)


async def test_official_openai_client(isolated):
    async with gateway_stack(isolated) as st:
        await st.snapshot()
        client = AsyncOpenAI(base_url=st.url + "/v1", api_key="unused", max_retries=0)
        try:
            c = await client.completions.create(model=MODEL, prompt="Once upon", max_tokens=3)
            assert c.choices[0].text and c.usage.completion_tokens == 3

            chunks = [
                ch async for ch in await client.completions.create(
                    model=MODEL, prompt="Once upon", max_tokens=3, stream=True)
            ]  # fmt: skip
            assert "".join(ch.choices[0].text for ch in chunks if ch.choices)

            chat = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
            assert chat.choices[0].message.content and chat.usage.completion_tokens == 3

            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                stream=True, stream_options={"include_usage": True},
            )  # fmt: skip
            chunks = [ch async for ch in stream]
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
            assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)

            models = await client.models.list()
            assert [m.id for m in models.data] == [MODEL]
        finally:
            await client.close()


async def test_models_health_metrics_and_bad_snapshots(isolated):
    async with gateway_stack(isolated) as st:
        async with st.http.get(st.url + "/health") as r:
            body = await r.json()
            assert r.status == 200 and body["nats_connected"] is True
            assert body["pods"]["total"] == 0

        await st.snapshot(ready={"pod-1": False}, models=[MODEL, "other-model"])
        async with st.http.get(st.url + "/v1/models") as r:
            body = await r.json()
        assert body["object"] == "list"
        assert sorted(m["id"] for m in body["data"]) == sorted([MODEL, "other-model"])
        async with st.http.get(st.url + "/health") as r:
            body = await r.json()
        assert body["pods"] == {"ready": 1, "not_ready": 1, "stale": 0, "total": 2}

        # bad messages on the snapshot subject are counted and dropped
        subject = st.names.pod_snapshots("p1")
        await st.nc.publish(subject, b"not json")
        await st.nc.publish(subject, orjson.dumps({"v": 1, "pool": "p1", "ts": 1.0, "pods": 3}))
        await st.nc.flush()

        async def invalid() -> float:
            m = await st.metrics()
            return sum(v for (n, _), v in m.items()
                       if n == "headroom_gateway_snapshots_invalid_total")  # fmt: skip

        for _ in range(100):
            if await invalid() >= 2:
                break
            await st.snapshot(ready={"pod-1": False})  # bounded: each waits for a snapshot
        assert await invalid() == 2
        m = await st.metrics()
        assert metric(m, "headroom_gateway_pods", state="ready") == 1
        assert metric(m, "headroom_gateway_pods", state="not_ready") == 1
        text = ""
        async with st.http.get(st.url + "/metrics") as r:
            text = await r.text()
        for name in (
            "headroom_gateway_requests_total", "headroom_gateway_routing_total",
            "headroom_gateway_predict_seconds", "headroom_gateway_requests_failed_total",
            "headroom_gateway_samples_published_total", "headroom_gateway_samples_failed_total",
            "headroom_gateway_pods", "inference_objective_request_ttft_seconds",
            "inference_objective_request_predicted_ttft_seconds",
            "inference_objective_request_tpot_seconds",
            "inference_objective_request_predicted_tpot_seconds",
        ):  # fmt: skip
            assert name in text, name
