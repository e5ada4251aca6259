"""What the front door costs per request: API-key verification, the privileged-header
policy and the shared rate limit, measured on the gateway's own objects.

    headroom bench access [--keys 1000] [--n 50000] [--redis-n 2000] --json OUT

Cases (each the median of ``--repeat`` runs of ``--n`` calls, in microseconds per request):

- ``before_keys``: what the request path did before keys existed (parse the scheduling
  headers, read the debug header), the baseline;
- ``no_key_file``: ``FrontDoor.caller`` + ``Caller.admit`` without a key file (the default
  gateway's path);
- ``key``: the same with a key file of ``--keys`` keys and a valid key (SHA-256 + constant-time
  compare + the key's header policy);
- ``limited_key``: a key with request and token limits never reached, against a real Redis
  (``--redis-url``; an embedded one if none answers): the prompt-token count, one Lua call
  per request (which also charges the previous request's output tokens); wall time per
  request on one connection, and this process's CPU per request;
- ``redis_get``: a plain Redis GET on the same client, for scale (redis-py's own cost).

Loopback only; bounded by ``--n`` and ``--redis-n``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import timeit
import uuid

from prometheus_client import CollectorRegistry

from bench.bench_predictor import write_result

HEADERS = {
    "host": "127.0.0.1:8080", "user-agent": "OpenAI/Python 1.0", "accept": "application/json",
    "content-type": "application/json", "content-length": "180",
    "x-llm-d-slo-ttft-ms": "500",
}  # fmt: skip
PROFILES = ("headroom", "llmd-predicted", "round-robin")
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "Say hello to the world"}]}'


def _per_call_us(fn, n: int, repeat: int) -> float:
    return statistics.median(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e6


async def _admit_us(caller, parsed, n: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            await caller.admit(parsed)
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


async def measure(args: argparse.Namespace) -> dict:
    from services.gateway.access import FrontDoor
    from services.gateway.api_keys import KeyPolicy, RateLimit, dump_key_file, new_api_key
    from services.gateway.explain import wants_debug
    from services.gateway.openai_request import parse_request
    from services.gateway.prompt import request_tokens
    from services.gateway.request_headers import parse_objective_headers
    from services.gateway.settings import GatewaySettings
    from shared import embedded
    from shared.subjects import Names

    names = Names(f"benchacc-{uuid.uuid4().hex[:8]}")
    parsed = parse_request(BODY, "chat")
    keys = [new_api_key(f"k{i}", KeyPolicy()) for i in range(args.keys)]
    limits = KeyPolicy(requests=RateLimit(10**8, 10**8), tokens=RateLimit(10**9, 10**9))
    limited, limited_key = new_api_key("limited", limits)
    redis_url, srv = embedded.ensure("redis", args.redis_url)
    out: dict = {"keys_in_file": args.keys, "n": args.n}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "keys.yaml")
        _write(path, dump_key_file([*(r for r, _ in keys), limited]))

        async def tokens(req):  # Gateway.prompt_tokens for a small body
            if req.tokens is None:
                req.tokens = request_tokens(req.prompts)
            return req.tokens

        off = FrontDoor(GatewaySettings(), names, CollectorRegistry(), PROFILES, tokens)
        on = FrontDoor(
            GatewaySettings(api_keys_path=path, pod_auth="none", redis_url=redis_url),
            names, CollectorRegistry(), PROFILES, tokens,
        )  # fmt: skip
        await on.start()
        try:
            anon = {**HEADERS, "authorization": "Bearer unused"}
            keyed = {**HEADERS, "authorization": f"Bearer {keys[len(keys) // 2][1]}"}
            lim_h = {**HEADERS, "authorization": f"Bearer {limited_key}"}

            def before() -> None:
                parse_objective_headers(anon, PROFILES)
                wants_debug(anon)

            out["before_keys_us"] = _per_call_us(before, args.n, args.repeat)
            c_off, c_on = off.caller(anon), on.caller(keyed)
            out["no_key_file_us"] = _per_call_us(
                lambda: off.caller(anon), args.n, args.repeat
            ) + await _admit_us(c_off, parsed, args.n, args.repeat)
            out["key_us"] = _per_call_us(
                lambda: on.caller(keyed), args.n, args.repeat
            ) + await _admit_us(c_on, parsed, args.n, args.repeat)
            c_lim = on.caller(lim_h)
            await c_lim.admit(parsed)  # connect, load the script
            cpu0, t0 = time.process_time(), time.perf_counter()
            for _ in range(args.redis_n):
                on.caller(lim_h)
                await c_lim.admit(parsed)
                c_lim.settled(8)
            limiter = on.limiter
            assert limiter is not None
            await limiter.flush()  # output tokens not yet carried by a next request
            wall = (time.perf_counter() - t0) / args.redis_n * 1e6
            cpu = (time.process_time() - cpu0) / args.redis_n * 1e6
            out["limited_key_wall_us"] = wall
            out["limited_key_cpu_us"] = cpu
            cpu0, t0 = time.process_time(), time.perf_counter()
            for _ in range(args.redis_n):
                await limiter.redis.get(limiter.key(limited.id, "none"))
            out["redis_get_wall_us"] = (time.perf_counter() - t0) / args.redis_n * 1e6
            out["redis_get_cpu_us"] = (time.process_time() - cpu0) / args.redis_n * 1e6
            errors = on.registry.get_sample_value(
                "headroom_gateway_ratelimit_redis_errors_total", {"action": "allowed"}
            )
            out["redis_errors"] = errors or 0.0
            await limiter.redis.delete(limiter.key(limited.id, "requests"),
                                       limiter.key(limited.id, "tokens"))  # fmt: skip
        finally:
            await on.stop()
            if srv is not None:
                srv.stop()
    out = {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}
    out["loadavg"] = list(os.getloadavg())
    return out


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="headroom bench access", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--keys", type=int, default=1000, help="keys in the key file")
    p.add_argument("--n", type=int, default=50_000, help="calls per timed run")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--redis-n", type=int, default=2000, help="limited-key requests (Redis)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--json", default=None, metavar="OUT")
    args = p.parse_args(argv)
    r = asyncio.run(measure(args))
    write_result(r, args.json)
    print(
        f"front door per request: before keys {r['before_keys_us']} us; no key file "
        f"{r['no_key_file_us']} us (+{r['no_key_file_us'] - r['before_keys_us']:.2f}); "
        f"a key of {r['keys_in_file']} {r['key_us']} us (+{r['key_us'] - r['before_keys_us']:.2f}); "
        f"a rate-limited key {r['limited_key_wall_us']} us wall, {r['limited_key_cpu_us']} us "
        f"CPU (one Redis round trip; a plain GET: {r['redis_get_wall_us']} us wall, "
        f"{r['redis_get_cpu_us']} us CPU; {r['redis_errors']:.0f} Redis errors)"
    )
    return 0
