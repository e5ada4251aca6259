"""The GCRA limiter against a real Redis (isolated namespace): bursts, refusals with the
right wait, both limits charged or neither, output-token debt, TTLs, and the failure mode
when Redis is unreachable."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from services.gateway.api_keys import KeyPolicy, RateLimit, new_api_key
from services.gateway.errors import GatewayError
from services.gateway.ratelimit import FLUSH_S, RedisLimiter, charges
from shared.embedded import free_port


def _limiter(url: str, names, **kw) -> RedisLimiter:
    redis = Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    lim = RedisLimiter(redis, names, registry := CollectorRegistry(), **kw)
    lim.registry = registry  # type: ignore[attr-defined]
    return lim


def _sample(lim: RedisLimiter, name: str, **labels) -> float:
    metric = {"limited": "headroom_gateway_rate_limited_total",
              "redis_errors": "headroom_gateway_ratelimit_redis_errors_total"}[name]  # fmt: skip
    return lim.registry.get_sample_value(metric, labels) or 0.0  # type: ignore[attr-defined]


async def test_requests_burst_then_refuse_with_the_wait(isolated):
    lim = _limiter(isolated["redis_url"], isolated["names"])
    key, _ = new_api_key("a", KeyPolicy(requests=RateLimit(6, 3)))  # one per 10 s, 3 at once
    try:
        for _ in range(3):
            await lim.acquire(key, charges(key, None))
        with pytest.raises(GatewayError) as e:
            await lim.acquire(key, charges(key, None))
        err = e.value
        assert err.status == 429 and err.type == "requests" and err.code == "rate_limit_exceeded"
        # the next unit is due one interval (10 s) after the burst, less the time elapsed
        assert 8 <= int(err.headers["Retry-After"]) <= 10, err.headers
        assert err.headers["x-ratelimit-remaining-requests"] == "0"
        assert _sample(lim, "limited", key=key.id, limit="requests") == 1
        rkey = lim.key(key.id, "requests")
        assert rkey.startswith(isolated["names"].redis_prefix)
        ttl = await lim.redis.pttl(rkey)
        assert 29_000 <= ttl <= 30_100, ttl  # until the bucket is full again: 3 x 10 s
    finally:
        await lim.close()


async def test_both_limits_are_charged_or_neither(isolated):
    lim = _limiter(isolated["redis_url"], isolated["names"])
    key, _ = new_api_key("b", KeyPolicy(requests=RateLimit(600, 600), tokens=RateLimit(100, 100)))
    try:
        await lim.acquire(key, charges(key, 80))
        with pytest.raises(GatewayError) as e:
            await lim.acquire(key, charges(key, 30))  # 80 + 30 > 100 tokens
        assert e.value.type == "tokens"
        # 20 left, plus what refilled meanwhile (one token per 0.6 s)
        assert e.value.headers["x-ratelimit-remaining-tokens"] in ("20", "21")
        r = lim.redis
        tat_req = float(await r.get(lim.key(key.id, "requests")))
        await lim.acquire(key, charges(key, 15))  # fits: the refused one charged nothing
        assert float(await r.get(lim.key(key.id, "requests"))) > tat_req
        with pytest.raises(GatewayError) as e:
            await lim.acquire(key, charges(key, 101))  # more than the burst: never fits
        assert e.value.code == "request_too_large" and "Retry-After" not in e.value.headers
    finally:
        await lim.close()


async def test_output_tokens_put_the_bucket_in_debt(isolated):
    lim = _limiter(isolated["redis_url"], isolated["names"])
    key, _ = new_api_key("c", KeyPolicy(tokens=RateLimit(60, 100)))  # 1 token/s
    try:
        await lim.acquire(key, charges(key, 50))
        lim.settle(key, 120)  # the request made 120 output tokens: 70 over the bucket
        with pytest.raises(GatewayError) as e:  # the debt rides with the next request
            await lim.acquire(key, charges(key, 1))
        # 170 charged, 100 tolerated: ~71 s until one more token fits
        assert 69 <= int(e.value.headers["Retry-After"]) <= 72, e.value.headers
        assert int(e.value.headers["x-ratelimit-remaining-tokens"]) == 0
        tkey = lim.key(key.id, "tokens")
        tat = float(await lim.redis.get(tkey))
        with pytest.raises(GatewayError):  # a refused request charged nothing more
            await lim.acquire(key, charges(key, 1))
        assert float(await lim.redis.get(tkey)) == tat
        # a debt with no next request is charged by the flusher, for every key at once
        other, _ = new_api_key("c2", KeyPolicy(tokens=RateLimit(60, 100)))
        lim.settle(key, 60)
        lim.settle(other, 30)
        lim.settle(other, 30)
        await asyncio.sleep(FLUSH_S * 3)
        assert not lim._debts
        assert float(await lim.redis.get(tkey)) == pytest.approx(tat + 60e6, abs=1)
        other_tat = float(await lim.redis.get(lim.key(other.id, "tokens")))
        assert other_tat - time.time() * 1e6 == pytest.approx(
            60e6, abs=2e6
        )  # Redis and we share a clock here
    finally:
        await lim.close()


async def test_redis_unreachable_fails_open_once_logged_then_pauses(isolated, caplog):
    names = isolated["names"]
    lim = _limiter(f"redis://127.0.0.1:{free_port()}/0", names, retry_s=30.0)
    key, _ = new_api_key("d", KeyPolicy(requests=RateLimit(1, 1), tokens=RateLimit(1, 1)))
    try:
        with caplog.at_level(logging.WARNING, logger="services.gateway.ratelimit"):
            for _ in range(5):  # a 1/min limit, yet all served: fail open
                await lim.acquire(key, charges(key, None))
        assert _sample(lim, "redis_errors", action="allowed") == 5
        lines = [r for r in caplog.records if "rate limiter: Redis failed" in r.getMessage()]
        assert len(lines) == 1, caplog.text  # one line, then the retry pause
        lim.settle(key, 10)  # owed, kept through the outage (the flusher cannot reach Redis)
        await asyncio.sleep(FLUSH_S * 2)
        assert lim._debts[key.id][1] == 10
    finally:
        await lim.close()


async def test_redis_unreachable_fails_closed_when_so_configured(isolated):
    lim = _limiter(f"redis://127.0.0.1:{free_port()}/0", isolated["names"], on_error="reject")
    key, _ = new_api_key("e", KeyPolicy(requests=RateLimit(100, 100)))
    try:
        with pytest.raises(GatewayError) as e:
            await lim.acquire(key, charges(key, None))
        assert e.value.status == 503 and e.value.code == "rate_limiter_unavailable"
        assert e.value.headers["Retry-After"] == "1"
        assert _sample(lim, "redis_errors", action="rejected") == 1
    finally:
        await lim.close()
