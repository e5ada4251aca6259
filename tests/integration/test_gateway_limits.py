"""Request limits through the real gateway and real simulator pods, over raw HTTP: an
oversized body (413, answered before it is read), nesting depth, max_tokens and prompts
against the context length the pods report (their /v1/models, read by the collector's
scraper), n and batch sizes; none of them reaches a pod (the pods' own request counters and
the gateway's routing counter do not move). A huge prompt is tokenized off the event loop:
a small request sent meanwhile is answered first."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import orjson
import pytest

from services.collector.discovery import PodTarget
from services.collector.scraper import Scraper
from tests.integration.gateway_harness import MODEL, Stack, gateway_stack, metric, wait_for

pytestmark = pytest.mark.timeout(120)

JSON = {"content-type": "application/json"}
SMALL = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@asynccontextmanager
async def limits_stack(isolated, **overrides):
    async with gateway_stack(isolated, n_pods=2, **overrides) as st:
        # the pods' context length as the collector reads it (vLLM's /v1/models max_model_len)
        scraper = Scraper(st.http)
        loads = {}
        for p in st.pods:
            n = await scraper.context_length(PodTarget(p.name, p.url))
            assert n == p.engine.max_request_tokens == 131_072
            loads[p.name] = {"max_model_len": n}
        await st.snapshot(loads=loads)
        yield st


async def pod_requests(st: Stack) -> float:
    """Generation/embedding requests the pods received (their http_requests_total)."""
    total = 0.0
    for p in st.pods:
        for (handler, _, _), n in p.metrics.http_requests.items():
            if handler.startswith("/v1/") and handler != "/v1/models":
                total += n
    return total


async def dispatches(st: Stack) -> float:
    m = await st.metrics()
    return sum(v for (name, _), v in m.items() if name == "headroom_gateway_routing_total")


async def limit_count(st: Stack, limit: str) -> float:
    return metric(await st.metrics(), "headroom_gateway_limit_rejections_total", limit=limit)


async def raw_post(st: Stack, path: str, data) -> tuple[int, dict]:
    async with st.http.post(st.url + path, data=data, headers=JSON) as r:
        return r.status, orjson.loads(await r.read())


async def test_20mb_body_is_413_at_once_while_others_are_served(isolated):
    async with limits_stack(isolated) as st:
        pods0, disp0 = await pod_requests(st), await dispatches(st)
        head = b'{"model": "' + MODEL.encode() + b'", "prompt": "'
        big = head + b"a " * (10 * 1024 * 1024) + b'"}'
        assert len(big) > 20_000_000

        async def post_big() -> tuple[int, dict, float]:
            t0 = time.perf_counter()
            status, body = await raw_post(st, "/v1/completions", big)
            return status, body, time.perf_counter() - t0

        (status, body, took), (small, _, _) = await asyncio.gather(
            post_big(), st.post("/v1/chat/completions", SMALL)
        )
        assert status == 413, body
        assert body["error"]["code"] == "request_too_large"
        assert body["error"]["type"] == "invalid_request_error"
        assert took < 1.0, f"413 took {took:.2f}s"
        assert small == 200
        print(f"\n413 for a {len(big) / 1e6:.0f} MB body in {took * 1000:.0f} ms")

        # no content-length (chunked): refused once the bytes received pass the limit
        async def chunks():
            yield head
            for _ in range(320):
                yield b"a " * 32768

        status, body = await raw_post(st, "/v1/completions", chunks())
        assert status == 413 and body["error"]["code"] == "request_too_large"
        assert await limit_count(st, "body_size") == 2
        assert await pod_requests(st) == pods0 + 1  # only the small request reached a pod
        assert await dispatches(st) == disp0 + 1


def nested(depth: int) -> bytes:
    return b'{"model": "%s", "prompt": "x", "extra": %s%s}' % (
        MODEL.encode(),
        b"[" * (depth - 1),
        b"]" * (depth - 1),
    )


async def test_nesting_depth_and_context_limits_never_reach_a_pod(isolated):
    async with limits_stack(isolated) as st:
        pods0, disp0 = await pod_requests(st), await dispatches(st)

        for depth in (300, 5000):  # ours (64), and beyond orjson's own limit (1,024)
            status, body = await raw_post(st, "/v1/completions", nested(depth))
            assert status == 400, body
            assert body["error"]["code"] == "json_too_deep"
        assert await limit_count(st, "json_depth") == 2
        status, _ = await raw_post(st, "/v1/completions", nested(60))  # within the limit
        assert status == 200

        for path, body in (
            ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 10**9}),
            ("/v1/chat/completions", {**SMALL, "max_tokens": 10**9}),
            ("/v1/chat/completions", {**SMALL, "max_completion_tokens": 131_070}),
        ):
            status, _, err = await st.post(path, body)
            assert status == 400, err
            e = err["error"]
            assert e["code"] == "context_length_exceeded" and "131072" in e["message"]
            assert e["param"] in ("max_tokens", "max_completion_tokens")
        assert await limit_count(st, "max_tokens") == 3

        long_prompt = "a " * 131_073  # one token over the context length by itself
        status, _, err = await st.post("/v1/completions", {"model": MODEL, "prompt": long_prompt})
        assert status == 400 and err["error"]["param"] == "prompt"
        status, _, err = await st.post("/v1/embeddings", {"model": MODEL, "input": long_prompt})
        assert status == 400 and err["error"]["param"] == "input"
        assert await limit_count(st, "context_length") == 2

        status, _, err = await st.post("/v1/chat/completions", {**SMALL, "n": 129})
        assert status == 400 and err["error"]["param"] == "n"
        assert await limit_count(st, "n") == 1

        assert await pod_requests(st) == pods0 + 1  # only the depth-60 request
        assert await dispatches(st) == disp0 + 1


async def test_batch_limit_and_settings(isolated):
    async with limits_stack(isolated, max_batch_prompts=3, max_body_bytes=4096) as st:
        status, _, err = await st.post("/v1/embeddings", {"model": MODEL, "input": ["a"] * 4})
        assert status == 400 and err["error"]["param"] == "input"
        status, _, _ = await st.post("/v1/embeddings", {"model": MODEL, "input": ["a"] * 3})
        assert status == 200
        status, _, err = await st.post("/v1/completions", {"model": MODEL, "prompt": "a" * 5000})
        assert status == 413
        assert await limit_count(st, "batch") == 1 and await limit_count(st, "body_size") == 1


async def test_huge_prompt_is_tokenized_off_the_event_loop(isolated):
    """A 6M-token prompt (12 MB, under the body limit; over the context length: refused once
    counted) keeps the offload thread busy for about a second; a small request sent while it
    is being tokenized is answered before it (a 1M-token prompt, ~0.15 s of tokenizing, left
    too little margin on a loaded 2-core box: failed once). The event loop's longest stall meanwhile is printed (pytest -s)."""
    async with limits_stack(isolated) as st:
        huge = orjson.dumps({"model": MODEL, "prompt": "a " * 6_000_000, "max_tokens": 1})
        lags: list[float] = []
        stop = asyncio.Event()

        async def probe() -> None:  # the event loop's stalls, as a 5 ms sleeper sees them
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(time.perf_counter() - t0 - 0.005)

        prober = asyncio.create_task(probe())
        t0 = time.perf_counter()
        big = asyncio.create_task(raw_post(st, "/v1/completions", huge))
        reg = st.gw.metrics.registry
        await wait_for(lambda: reg.get_sample_value("headroom_gateway_offloaded_requests") >= 1,
                       what="the huge prompt in the offload thread")  # fmt: skip
        t1 = time.perf_counter()
        status, _, _ = await st.post("/v1/chat/completions", SMALL)
        small_s = time.perf_counter() - t1
        assert status == 200
        assert not big.done(), "the small request waited for the huge prompt"
        status, err = await big
        big_s = time.perf_counter() - t0
        stop.set()
        await prober
        assert status == 400 and err["error"]["code"] == "context_length_exceeded"
        assert "6000000 tokens" in err["error"]["message"]
        print(f"\nhuge prompt answered in {big_s:.2f}s; small request {small_s * 1000:.0f} ms; "
              f"event loop stall max {max(lags) * 1000:.0f} ms, "
              f"p99 {sorted(lags)[int(len(lags) * 0.99)] * 1000:.0f} ms over {len(lags)}")  # fmt: skip
