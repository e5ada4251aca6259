"""Simulated pod over real HTTP on 127.0.0.1: OpenAI endpoints, metrics, faults, aborts."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families

from services.simulator.server import start_pod
from services.simulator.settings import DEFAULT_MODEL
from shared.tokenizer import count_tokens, synth_text

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def pod():
    p = await start_pod("pod-test", seed=3)
    try:
        yield p
    finally:
        await p.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        yield s


async def sse_events(resp: aiohttp.ClientResponse) -> list[bytes]:
    body = await resp.read()
    assert body.endswith(b"\n\n")
    return [e.removeprefix(b"data: ") for e in body.split(b"\n\n") if e]


async def metrics(http, pod) -> dict[str, dict]:
    async with http.get(pod.url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    out: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(m: dict, name: str) -> float:
    [(labels, v)] = [(k, v) for k, v in m[name].items()]
    assert dict(labels) == {"model_name": DEFAULT_MODEL, "engine": "0"}
    return v


# ---- plain endpoints ---------------------------------------------------------------------


async def test_health_and_models(pod, http):
    assert pod.url.startswith("http://127.0.0.1:") and not pod.url.endswith(":0")
    async with http.get(pod.url + "/health") as r:
        assert r.status == 200 and await r.json() == {"status": "ok"}
    async with http.get(pod.url + "/v1/models") as r:
        body = await r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [DEFAULT_MODEL]


# ---- completions ----------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["The quick brown fox jumps", ["The quick brown fox jumps"]])
async def test_completion_non_streaming(pod, http, prompt):
    async with http.post(
        pod.url + "/v1/completions", json={"model": DEFAULT_MODEL, "prompt": prompt}
    ) as r:
        assert r.status == 200
        body = await r.json()
    assert body["object"] == "text_completion" and body["model"] == DEFAULT_MODEL
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length"
    assert count_tokens(choice["text"]) == 16  # default max_tokens
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 16, "total_tokens": 21}


async def test_completion_streaming_with_usage(pod, http):
    req = {
        "prompt": "one two three",
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = await sse_events(r)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    tokens, usage = chunks[:-1], chunks[-1]
    assert len(tokens) == 6
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 5 + ["length"]
    assert count_tokens("".join(c["choices"][0]["text"] for c in tokens)) == 6
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}


async def test_streaming_without_usage_has_one_chunk_per_token(pod, http):
    req = {"prompt": "hello", "max_tokens": 4, "stream": True}
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        events = await sse_events(r)
    assert len(events) == 5 and events[-1] == b"[DONE]"
    assert all("usage" not in orjson.loads(e) for e in events[:-1])


# ---- chat -------------------------------------------------------------------------------


async def test_chat_non_streaming_default_length(pod, http):
    req = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "Hi there"}]}
    async with http.post(pod.url + "/v1/chat/completions", json=req) as r:
        assert r.status == 200
        body = await r.json()
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and count_tokens(msg["content"]) == 128
    assert body["usage"]["completion_tokens"] == 128
    assert body["usage"]["prompt_tokens"] == count_tokens("<|user|> Hi there\n<|assistant|>")


async def test_chat_streaming_first_chunk_carries_role(pod, http):
    req = {
        "messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "x"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with http.post(pod.url + "/v1/chat/completions", json=req) as r:
        events = await sse_events(r)
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks[:3]]
    assert deltas[0]["role"] == "assistant"
    assert all("role" not in d for d in deltas[1:])
    assert chunks[2]["choices"][0]["finish_reason"] == "length"
    assert chunks[3]["usage"]["completion_tokens"] == 3


# ---- errors -----------------------------------------------------------------------------


BAD_REQUESTS = [
    ("/v1/completions", b"{not json", None),
    ("/v1/completions", b"[1, 2]", None),
    ("/v1/completions", b"{}", "prompt"),
    ("/v1/completions", b'{"prompt": 5}', "prompt"),
    ("/v1/completions", b'{"prompt": ["a", 2]}', "prompt"),
    ("/v1/completions", b'{"prompt": "a", "n": 0}', "n"),
    ("/v1/completions", b'{"prompt": "a", "max_tokens": "7"}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "a", "max_tokens": 0}', "max_tokens"),
    ("/v1/completions", b'{"prompt": "a", "stream": "yes"}', "stream"),
    ("/v1/completions", b'{"prompt": "a", "model": 3}', "model"),
    ("/v1/completions", b'{"prompt": ""}', "prompt"),
    ("/v1/completions", b'{"prompt": "a", "max_tokens": 10000000}', "max_tokens"),
    ("/v1/chat/completions", b'{"messages": []}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user"}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"content": "x"}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": "hi"}', "messages"),
    ("/v1/embeddings", b'{"input": ""}', "input"),
    ("/v1/embeddings", b'{"input": [1, "a"]}', "input"),
    ("/v1/embeddings", b'{"input": "a", "encoding_format": "hex"}', "encoding_format"),
]


@pytest.mark.parametrize(("path", "raw", "param"), BAD_REQUESTS)
async def test_bad_requests_get_openai_400(pod, http, path, raw, param):
    async with http.post(
        pod.url + path, data=raw, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
        body = await r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param


async def test_unknown_model_is_404(pod, http):
    req = {"model": "gpt-nope", "prompt": "hi"}
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        assert r.status == 404
        body = await r.json()
    assert "gpt-nope" in body["error"]["message"]


# ---- metrics ----------------------------------------------------------------------------


GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = tuple(
    f"vllm:{n}_total"
    for n in (
        "prefix_cache_queries",
        "prefix_cache_hits",
        "prompt_tokens",
        "generation_tokens",
        "num_preemptions",
        "request_success",
    )
)
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)


async def test_metrics_names_labels_and_counters_move(pod, http):
    before = await metrics(http, pod)
    for name in GAUGES + COUNTERS:
        value(before, name)
    for name in HISTOGRAMS:
        assert value(before, name + "_count") == 0
    [(labels, _)] = before["vllm:cache_config_info"].items()
    assert dict(labels)["block_size"] == "16"
    assert int(dict(labels)["num_gpu_blocks"]) == pod.engine.profile.num_gpu_blocks
    [(labels, _)] = before["vllm:lora_requests_info"].items()
    assert {"max_lora", "running_lora_adapters", "waiting_lora_adapters"} <= set(dict(labels))

    req = {"prompt": "alpha beta gamma delta", "max_tokens": 5}
    for _ in range(2):
        async with http.post(pod.url + "/v1/completions", json=req) as r:
            assert r.status == 200
    after = await metrics(http, pod)
    assert value(after, "vllm:request_success_total") == 2
    assert value(after, "vllm:prompt_tokens_total") == 8
    assert value(after, "vllm:generation_tokens_total") == 10
    assert value(after, "vllm:prefix_cache_queries_total") == 8
    assert value(after, "vllm:time_to_first_token_seconds_count") == 2
    assert value(after, "vllm:inter_token_latency_seconds_count") == 8
    assert value(after, "vllm:e2e_request_latency_seconds_count") == 2
    assert 0 < value(after, "vllm:e2e_request_latency_seconds_sum") < 10
    assert value(after, "vllm:num_requests_running") == 0
    assert value(after, "vllm:kv_cache_usage_perc") == 0


async def test_shared_prefix_shows_prefix_cache_hits(pod, http):
    system = " ".join(f"word{i}" for i in range(200))
    for q in ("first question", "second question"):
        req = {"prompt": f"{system} {q}", "max_tokens": 2}
        async with http.post(pod.url + "/v1/completions", json=req) as r:
            assert r.status == 200
    m = await metrics(http, pod)
    assert value(m, "vllm:prefix_cache_hits_total") >= 192  # 12 full blocks of the prefix
    assert value(m, "vllm:prefix_cache_queries_total") == 2 * 202


async def test_gauges_show_load_while_busy(pod, http):
    req = {"prompt": "load test", "max_tokens": 40}

    async def one():
        async with http.post(pod.url + "/v1/completions", json=req) as r:
            assert r.status == 200
            return await r.json()

    tasks = [asyncio.create_task(one()) for _ in range(8)]
    seen_running = 0.0
    for _ in range(100):
        m = await metrics(http, pod)
        seen_running = max(seen_running, value(m, "vllm:num_requests_running"))
        if seen_running > 0 or all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*tasks)
    assert seen_running > 0
    assert all(r["usage"]["completion_tokens"] == 40 for r in results)


# ---- faults -----------------------------------------------------------------------------


async def set_fault(http, pod, **body) -> dict:
    async with http.post(pod.url + "/sim/fault", json=body) as r:
        assert r.status == 200
        return await r.json()


async def test_fault_error_affects_next_count_requests(pod, http):
    state = await set_fault(http, pod, mode="error", count=2, status=503)
    assert state["mode"] == "error" and state["count"] == 2
    req = {"prompt": "hi", "max_tokens": 2}
    statuses = []
    for _ in range(3):
        async with http.post(pod.url + "/v1/completions", json=req) as r:
            statuses.append(r.status)
            body = await r.json()
    assert statuses == [503, 503, 200]
    assert "choices" in body
    async with http.get(pod.url + "/sim/fault") as r:
        assert (await r.json())["mode"] == "off"


async def test_fault_error_default_status_and_body(pod, http):
    await set_fault(http, pod, mode="error")
    async with http.post(pod.url + "/v1/chat/completions", json={"messages": []}) as r:
        assert r.status == 400  # invalid requests do not consume the fault
    req = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    async with http.post(pod.url + "/v1/chat/completions", json=req) as r:
        assert r.status == 500
        body = await r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_fault_drop_streaming_closes_after_tokens(pod, http):
    await set_fault(http, pod, mode="drop", after_tokens=3)
    req = {"prompt": "drop me", "max_tokens": 10, "stream": True}
    received = b""
    with pytest.raises(aiohttp.ClientError):
        async with http.post(pod.url + "/v1/completions", json=req) as r:
            assert r.status == 200
            async for chunk in r.content.iter_any():
                received += chunk
    events = [e for e in received.split(b"\n\n") if e]
    assert len(events) == 3 and b"[DONE]" not in received
    await asyncio.sleep(0.05)
    assert not pod.engine.has_work()  # the dropped request was aborted in the engine
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        events = await sse_events(r)
    assert events[-1] == b"[DONE]" and len(events) == 11


async def test_fault_drop_non_streaming_closes_before_response(pod, http):
    await set_fault(http, pod, mode="drop", count=1)
    with pytest.raises(aiohttp.ClientError):
        async with http.post(pod.url + "/v1/completions", json={"prompt": "x"}) as r:
            await r.read()
    async with http.post(pod.url + "/v1/completions", json={"prompt": "x"}) as r:
        assert r.status == 200


async def test_fault_off_clears_and_bad_fault_is_400(pod, http):
    await set_fault(http, pod, mode="error", count=5)
    state = await set_fault(http, pod, mode="off")
    assert state["mode"] == "off" and state["count"] == 0
    async with http.post(pod.url + "/v1/completions", json={"prompt": "x"}) as r:
        assert r.status == 200
    for bad in ({"mode": "explode"}, {"mode": "error", "count": "2"}, {"mode": "drop", "x": 1}):
        async with http.post(pod.url + "/sim/fault", json=bad) as r:
            assert r.status == 400
            assert (await r.json())["error"]["type"] == "invalid_request_error"


# ---- disconnects, multiple pods -----------------------------------------------------------


async def test_client_disconnect_aborts_request(pod, http):
    req = {"prompt": "long answer please", "max_tokens": 2000, "stream": True}
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        await r.content.readuntil(b"\n\n")
        r.close()  # drop the connection mid-stream
    for _ in range(100):
        if not pod.engine.has_work():
            break
        await asyncio.sleep(0.02)
    assert not pod.engine.has_work()
    assert pod.engine.stats().request_aborted == 1


async def _pod_drops_idle(pod) -> None:
    for _ in range(250):
        if not pod.engine.has_work():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the pod still has work after its client left")


@pytest.mark.parametrize("stream", [True, False])
async def test_client_leaving_before_the_first_token_aborts_the_request(pod, stream):
    """A long prompt (2.7 s of prefill) and a client that leaves while it is prefilled:
    the engine forgets the request (its KV blocks and batch slot are free again)."""
    host, port = pod.url.removeprefix("http://").rsplit(":", 1)
    _r, w = await asyncio.open_connection(host, int(port))
    body = orjson.dumps({"prompt": synth_text(40_000, seed=9), "max_tokens": 20, "stream": stream})
    w.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
    await w.drain()
    for _ in range(250):
        if pod.engine.stats().kv_usage > 0:  # prefilling: KV blocks held
            break
        await asyncio.sleep(0.02)
    assert pod.engine.stats().kv_usage > 0 and pod.engine.stats().generation_tokens == 0
    w.close()
    await _pod_drops_idle(pod)
    s = pod.engine.stats()
    assert s.request_aborted == 1 and s.request_success == 0 and s.kv_usage == 0


async def test_client_leaving_a_non_streaming_request_stops_its_generation(pod, http):
    req = {"prompt": "long answer please", "max_tokens": 3000}
    task = asyncio.create_task(http.post(pod.url + "/v1/completions", json=req))
    for _ in range(250):
        if pod.engine.stats().running == 1:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # decoding
    task.cancel()  # the client gives up: its connection is closed
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await _pod_drops_idle(pod)
    assert pod.engine.stats().request_aborted == 1


async def test_two_pods_in_one_process(http):
    a = await start_pod("pod-a", seed=1)
    b = await start_pod("pod-b", seed=2, profile="a100-llama3-8b", model="other/model")
    try:
        assert a.url != b.url and a.name == "pod-a" and b.name == "pod-b"
        async with http.post(a.url + "/v1/completions", json={"prompt": "x"}) as r:
            assert r.status == 200
        async with http.post(
            b.url + "/v1/completions", json={"prompt": "x", "model": DEFAULT_MODEL}
        ) as r:
            assert r.status == 404  # b serves another model
        async with http.post(
            b.url + "/v1/completions", json={"prompt": "x", "model": "other/model"}
        ) as r:
            assert r.status == 200
        async with http.get(b.url + "/metrics") as r:
            text = await r.text()
        assert 'model_name="other/model"' in text
        assert a.engine.stats().request_success == 1
        assert b.engine.stats().request_success == 1
    finally:
        await a.stop()
        await b.stop()


async def test_stop_cuts_in_flight_requests_quickly(http):
    p = await start_pod("pod-stop")
    req = {"prompt": "x", "max_tokens": 3000}

    async def one(stream: bool):
        try:
            async with http.post(p.url + "/v1/completions", json={**req, "stream": stream}) as r:
                await r.read()
                return r.status
        except aiohttp.ClientError as e:
            return e

    tasks = [asyncio.create_task(one(s)) for s in (True, False)]
    for _ in range(100):
        if p.engine.stats().running == 2:
            break
        await asyncio.sleep(0.02)
    await asyncio.wait_for(p.stop(), 5)
    streamed, plain = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert isinstance(streamed, aiohttp.ClientError)  # stream cut without [DONE]
    assert plain == 500


# ---- official client ----------------------------------------------------------------------


async def test_openai_client_completions_and_chat(pod):
    client = AsyncOpenAI(base_url=pod.url + "/v1", api_key="x", max_retries=0)
    try:
        c = await client.completions.create(model=DEFAULT_MODEL, prompt="Say hi", max_tokens=4)
        assert c.usage.completion_tokens == 4 and c.choices[0].finish_reason == "length"
        chat = await client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
        assert chat.choices[0].message.role == "assistant"
        assert count_tokens(chat.choices[0].message.content) == 5

        stream = await client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, usage = [], None
        async for ch in stream:
            if ch.choices:
                pieces.append(ch.choices[0].delta.content)
            if ch.usage:
                usage = ch.usage
        assert len(pieces) == 5 and usage.completion_tokens == 5

        cstream = await client.completions.create(
            model=DEFAULT_MODEL, prompt="Say hi", max_tokens=3, stream=True
        )
        texts = [ch.choices[0].text async for ch in cstream]
        assert len(texts) == 3
        models = await client.models.list()
        assert [m.id for m in models.data] == [DEFAULT_MODEL]
    finally:
        await client.close()


# ---- OpenAI coverage: n, batches, token ids, tool calls, embeddings -------------------------


async def test_n_and_batches_are_the_work_of_every_sequence(pod, http):
    before = await metrics(http, pod)
    req = {"prompt": ["one two", "three four five"], "n": 2, "max_tokens": 3}
    async with http.post(pod.url + "/v1/completions", json=req) as r:
        assert r.status == 200
        body = await r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["choices"][0]["text"] != body["choices"][1]["text"]  # two samples of prompt 0
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17}
    after = await metrics(http, pod)
    gen = "vllm:generation_tokens_total"
    assert value(after, gen) - value(before, gen) == 12  # 4 sequences of 3 tokens
    assert (
        value(after, "vllm:request_success_total") - value(before, "vllm:request_success_total")
        == 4
    )

    async with http.post(pod.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 2, "stream": True,
    }) as r:  # fmt: skip
        events = await sse_events(r)
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert sorted(c["choices"][0]["index"] for c in chunks) == [0, 0, 1, 1]


async def test_forced_tool_call(pod, http):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}]  # fmt: skip
    req = {"messages": [{"role": "user", "content": "find it"}], "tools": tools,
           "tool_choice": "required", "max_tokens": 4}  # fmt: skip
    async with http.post(pod.url + "/v1/chat/completions", json=req) as r:
        body = await r.json()
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "lookup"
    assert list(orjson.loads(call["function"]["arguments"])) == ["query"]
    auto = {**req, "tool_choice": "auto"}
    async with http.post(pod.url + "/v1/chat/completions", json=auto) as r:
        body = await r.json()
    assert (
        body["choices"][0]["message"]["content"] and body["choices"][0]["finish_reason"] == "length"
    )


async def test_embeddings_are_prefill_only(pod, http):
    before = await metrics(http, pod)
    req = {"model": DEFAULT_MODEL, "input": ["a b c", "d e"], "dimensions": 16}
    async with http.post(pod.url + "/v1/embeddings", json=req) as r:
        assert r.status == 200
        body = await r.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 16 for d in body["data"])
    assert body["usage"]["prompt_tokens"] == 5
    after = await metrics(http, pod)
    assert value(after, "vllm:prompt_tokens_total") - value(before, "vllm:prompt_tokens_total") == 5
    ttft = "vllm:time_to_first_token_seconds_count"
    assert value(after, ttft) - value(before, ttft) == 2  # one prefill per input
    async with http.post(pod.url + "/v1/embeddings", json=req) as r:
        again = await r.json()
    assert again["data"] == body["data"]  # deterministic vectors


async def test_http_requests_are_counted_as_vllm_does(pod, http):
    async with http.post(pod.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}) as r:
        assert r.status == 200
    async with http.post(pod.url + "/v1/completions", json={"prompt": 5}) as r:
        assert r.status == 400
    m = await metrics(http, pod)
    reqs = {dict(k)["status"]: v for k, v in m["http_requests_total"].items()
            if dict(k)["handler"] == "/v1/completions"}  # fmt: skip
    assert reqs == {"2xx": 1, "4xx": 1}


async def test_service_pods_run_the_deployments_vllm_flags(http):
    from services.simulator.main import SimulatorProcess
    from services.simulator.settings import SimulatorSettings

    flags = "--gpu-memory-utilization=0.5 --block-size=32 --no-enable-prefix-caching"
    settings = SimulatorSettings(ports="0", vllm_args=flags)
    proc = SimulatorProcess(settings)
    await proc.start()
    try:
        [pod] = proc.pods
        expected = settings.engine_profile()
        assert pod.engine.profile == expected and expected.block_size == 32
        async with http.get(f"{pod.url}/metrics") as r:
            text = await r.text()
        [family] = [f for f in text_string_to_metric_families(text)
                    if f.name == "vllm:cache_config_info"]  # fmt: skip
        labels = family.samples[0].labels
        assert labels["block_size"] == "32"
        assert labels["num_gpu_blocks"] == str(expected.num_gpu_blocks)
        assert labels["enable_prefix_caching"] == "False"
    finally:
        await proc.stop()
