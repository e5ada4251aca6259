"""What the gateway adds: the same request stream sent directly to simulator pods and
through the gateway, with predicted-latency routing active (prediction round trip included).

    headroom bench gateway [--rate 100] [--duration 20] [--pods 8] [--max-tokens 32] --json OUT

Starts the dev stack (services/launcher.py: 8 simulator pods in one process, collector, one
predictor, trainer (refits disabled), gateway; NATS/Redis reused or embedded) under a fresh
namespace, after publishing a fitted model (200 trees, depth 6) so routing is "predicted"
from the first request. By default the model is pod-neutral (labels depend on the prompt
length only: full-size trees, equal predictions across candidates) and the profile is
``llmd-predicted`` (weighted random pick), so gateway-routed requests spread over the pods
like the direct ones and the difference is the gateway's overhead, not a routing effect. Then two phases, streaming and non-streaming, each ``--duration`` seconds of Poisson
arrivals at ``--rate`` requests/s; every request is sent twice at the same moment, once
straight to a pod (round robin) and once through the gateway, so both copies meet the same
pod load. Reports rate_rps, added_ttft_ms {p50,p99} (streaming phase) and added_e2e_ms
{p50,p99} (non-streaming phase) as percentile(gateway) - percentile(direct), the raw
distributions, the routing paths seen, and the gateway process's CPU per request (utime +
stime from /proc/<pid>/stat over each phase). Bounded in time and count; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid

import aiohttp
import numpy as np

from bench.bench_predictor import (
    delete_namespace,
    latency_summary,
    loadavg,
    proc_cpu_s,
    proc_cpu_split_s,
    publish_model,
    write_result,
)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron".split()


def prompts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs of distinct random prompts of equal length (40-300 words): the direct and
    the gateway copy of a request. Never reused, so no copy finds the other's (or an
    earlier request's) prefix in a pod's cache."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(40, 300)
        out.append((" ".join(rng.choices(WORDS, k=k)), " ".join(rng.choices(WORDS, k=k))))
    return out


async def one(
    http: aiohttp.ClientSession,
    url: str,
    prompt: str,
    stream: bool,
    max_tokens: int,
    headers: dict[str, str] | None = None,
) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream}
    t0 = time.perf_counter()
    ttft = None
    try:
        async with http.post(url + "/v1/completions", json=body, headers=headers) as r:
            if stream:
                async for line in r.content:
                    if ttft is None and line.startswith(b"data:") and b"[DONE]" not in line:
                        ttft = (time.perf_counter() - t0) * 1e3
            else:
                await r.read()
            e2e = (time.perf_counter() - t0) * 1e3
            return {"status": r.status, "ttft": ttft, "e2e": e2e,
                    "routing": r.headers.get("x-headroom-routing"),
                    "pod": r.headers.get("x-headroom-pod")}  # fmt: skip
    except (aiohttp.ClientError, TimeoutError) as e:
        return {"status": 0, "error": str(e), "ttft": None, "e2e": None, "routing": None,
                "pod": None}  # fmt: skip


async def phase(
    http: aiohttp.ClientSession,
    gateway_url: str,
    pod_urls: list[str],
    texts: list[tuple[str, str]],
    *,
    stream: bool,
    rate: float,
    duration_s: float,
    max_tokens: int,
    seed: int,
    gateway_headers: dict[str, str] | None = None,
) -> tuple[list[dict], list[dict], float]:
    """Poisson arrivals; each request sent directly and through the gateway at once."""
    rng = np.random.default_rng(seed)
    n = int(rate * duration_s)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    direct: list[dict] = []
    via: list[dict] = []
    tasks = []

    async def pair(i: int) -> None:
        a, b = texts[i % len(texts)]
        d, g = await asyncio.gather(
            one(http, pod_urls[i % len(pod_urls)], a, stream, max_tokens),
            one(http, gateway_url, b, stream, max_tokens, gateway_headers),
        )
        direct.append(d)
        via.append(g)

    start = time.perf_counter()
    for i in range(n):
        delay = arrivals[i] - (time.perf_counter() - start)
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(pair(i)))
    await asyncio.wait(tasks, timeout=60)
    return direct, via, time.perf_counter() - start


def _ok(rs: list[dict], key: str) -> list[float]:
    return [r[key] for r in rs if r["status"] == 200 and r[key] is not None]


def added(direct: list[dict], via: list[dict], key: str) -> dict:
    d, g = latency_summary(_ok(direct, key)), latency_summary(_ok(via, key))
    out = {q: round(g[q] - d[q], 3) if g[q] is not None and d[q] is not None else None
           for q in ("p50", "p99")}  # fmt: skip
    return out


async def gateway_histograms(http: aiohttp.ClientSession, url: str) -> dict:
    """Count and sum of the gateway's prediction-call and scheduling-cycle histograms."""
    from prometheus_client.parser import text_string_to_metric_families

    for attempt in range(3):  # a pooled connection the server closed while idle: retry
        try:
            async with http.get(url + "/metrics") as r:
                text = await r.text()
            break
        except aiohttp.ServerDisconnectedError:
            if attempt == 2:
                raise
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in ("headroom_gateway_predict_seconds",
                        "headroom_gateway_scheduler_duration_seconds"):  # fmt: skip
            for smp in fam.samples:
                if smp.name.endswith(("_count", "_sum")):
                    key = smp.name.removeprefix("headroom_gateway_")
                    out[key] = out.get(key, 0.0) + smp.value
        elif fam.name == "headroom_gateway_gc_pause_seconds":
            for smp in fam.samples:
                gen = smp.labels.get("generation")
                if smp.name.endswith(("_count", "_sum")):
                    out[f"gc{gen}_{smp.name.rsplit('_', 1)[1]}"] = smp.value
                elif smp.name.endswith("_bucket"):
                    out[f"gc{gen}_le_{smp.labels['le']}"] = smp.value
    return out


def gc_summary(h0: dict, h1: dict) -> dict:
    """Garbage collections during a phase, per generation: count, mean and total pause (ms)
    and the bucket bound the longest one fell under."""
    out = {}
    for gen in ("0", "1", "2"):
        n = h1.get(f"gc{gen}_count", 0) - h0.get(f"gc{gen}_count", 0)
        total = h1.get(f"gc{gen}_sum", 0) - h0.get(f"gc{gen}_sum", 0)
        longest = None
        bounds = sorted((float(k.rsplit("_", 1)[1]), k) for k in h1 if k.startswith(f"gc{gen}_le_"))
        for bound, key in bounds:
            if h1[key] - h0.get(key, 0) >= n:
                longest = bound
                break
        out[gen] = {"collections": int(n), "total_ms": round(total * 1e3, 2),
                    "mean_ms": round(total / n * 1e3, 3) if n else None,
                    "longest_under_ms": None if not n or longest is None else longest * 1e3}  # fmt: skip
    return out


def _mean_ms(h0: dict, h1: dict, name: str) -> float | None:
    n = h1.get(f"{name}_count", 0) - h0.get(f"{name}_count", 0)
    s = h1.get(f"{name}_sum", 0) - h0.get(f"{name}_sum", 0)
    return round(s / n * 1e3, 3) if n else None


def summarize(
    direct,
    via,
    cpu_s: float,
    elapsed: float,
    idle_s_per_s: float = 0.0,
    user_kernel_s: tuple[float, float] | None = None,
) -> dict:
    """``idle_s_per_s``: the gateway's CPU with no requests (the background work every
    phase pays whatever the rate), subtracted for the marginal cost per request.
    ``user_kernel_s``: ``cpu_s`` split into user space and kernel (on loopback the kernel
    part includes the receiving side's TCP work for every write the gateway makes)."""
    routing: dict[str, int] = {}
    pods: dict[str, int] = {}
    for r in via:
        routing[str(r["routing"])] = routing.get(str(r["routing"]), 0) + 1
        pods[str(r["pod"])] = pods.get(str(r["pod"]), 0) + 1
    n = len(via)
    return {
        "requests": n,
        "errors": {
            "direct": sum(r["status"] != 200 for r in direct),
            "gateway": sum(r["status"] != 200 for r in via),
        },
        "ttft_ms": {
            "direct": latency_summary(_ok(direct, "ttft")),
            "gateway": latency_summary(_ok(via, "ttft")),
        },
        "e2e_ms": {
            "direct": latency_summary(_ok(direct, "e2e")),
            "gateway": latency_summary(_ok(via, "e2e")),
        },
        "routing": routing,
        "pods": dict(sorted(pods.items())),
        "gateway_cpu_ms_per_request": round(cpu_s / n * 1e3, 3) if n else None,
        "gateway_cpu_s_per_s": round(cpu_s / elapsed, 3),
        "gateway_idle_cpu_s_per_s": round(idle_s_per_s, 4),
        "gateway_cpu_ms_per_request_marginal": round((cpu_s - idle_s_per_s * elapsed) / n * 1e3, 3)
        if n
        else None,
        "gateway_cpu_ms_per_request_user_kernel": [round(x / n * 1e3, 3) for x in user_kernel_s]
        if n and user_kernel_s is not None
        else None,
    }


async def measure(args: argparse.Namespace, stack) -> dict:
    gw = next(c for c in stack.children if c.service == "gateway")
    pods = list(stack.pod_urls.values())
    n = int(args.rate * args.duration) + 1
    warm, texts = prompts(int(args.rate * 2) + 1, seed=99), prompts(n * 2, seed=1)
    timeout = aiohttp.ClientTimeout(total=60)
    conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
        # warm-up: connections, first predictions, not measured
        auth = {"authorization": f"Bearer {args.client_key}"} if args.client_key else None
        await phase(http, stack.gateway_url, pods, warm, stream=True, rate=args.rate,
                    duration_s=2.0, max_tokens=args.max_tokens, seed=99,
                    gateway_headers=auth)  # fmt: skip
        # idle: what the gateway spends with no requests (pod metrics, model watch, ...)
        await asyncio.sleep(1.0)
        cpu0, t0 = proc_cpu_s(gw.proc.pid), time.perf_counter()
        await asyncio.sleep(args.idle)
        idle = (proc_cpu_s(gw.proc.pid) - cpu0) / (time.perf_counter() - t0)
        out = {}
        for name, stream in (("streaming", True), ("non_streaming", False)):
            h0 = await gateway_histograms(http, stack.gateway_url)
            load0, cpu0 = loadavg(), proc_cpu_s(gw.proc.pid)
            split0 = proc_cpu_split_s(gw.proc.pid)
            procs = {c.name: c.proc.pid for c in stack.children} | {"bench-client": os.getpid()}
            all0 = {k: proc_cpu_s(pid) for k, pid in procs.items()}
            direct, via, elapsed = await phase(
                http, stack.gateway_url, pods, texts[:n] if stream else texts[n:], stream=stream, rate=args.rate,
                duration_s=args.duration, max_tokens=args.max_tokens, seed=1 if stream else 2,
                gateway_headers=auth,
            )  # fmt: skip
            cpu = proc_cpu_s(gw.proc.pid) - cpu0
            user_kernel = tuple(
                b - a for a, b in zip(split0, proc_cpu_split_s(gw.proc.pid), strict=True)
            )
            busy = {k: round((proc_cpu_s(pid) - all0[k]) / elapsed, 3) for k, pid in procs.items()}
            h1 = await gateway_histograms(http, stack.gateway_url)
            out[name] = {**summarize(direct, via, cpu, elapsed, idle, user_kernel),  # type: ignore[arg-type]
                         "duration_s": round(elapsed, 2),
                         "loadavg_before": load0, "loadavg_after": loadavg(),
                         "cpu_s_per_s": busy,
                         "predict_call_mean_ms": _mean_ms(h0, h1, "predict_seconds"),
                         "gateway_gc": gc_summary(h0, h1),
                         "scheduling_mean_ms": _mean_ms(h0, h1, "scheduler_duration_seconds")}  # fmt: skip
            out[name]["_raw"] = (direct, via)
    s, ns = out["streaming"], out["non_streaming"]
    result = {
        "rate_rps": args.rate,
        "pods": args.pods,
        "max_tokens": args.max_tokens,
        "api_keys": args.api_keys,
        "added_ttft_ms": added(*s.pop("_raw"), "ttft"),
        "added_e2e_ms": added(*ns.pop("_raw"), "e2e"),
        "gateway_cpu_ms_per_streamed_request": s["gateway_cpu_ms_per_request"],
        "requests_per_core_s_streamed": round(1000 / s["gateway_cpu_ms_per_request"], 1)
        if s["gateway_cpu_ms_per_request"]
        else None,
        "streaming": s,
        "non_streaming": ns,
    }
    return result


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="headroom bench gateway", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--rate", type=float, default=100.0, help="requests/s (each sent twice)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--idle", type=float, default=5.0,
                   help="seconds without requests, for the gateway's background CPU")  # fmt: skip
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument(
        "--profile",
        default="llmd-predicted",
        help="gateway scheduling profile (llmd-predicted: predictions + weighted random pick, "
        "so equal predictions spread like round robin)",
    )
    p.add_argument(
        "--real-model",
        action="store_true",
        help="route by a model fitted on load features (measures routing effects too, "
        "not only the gateway's overhead)",
    )
    p.add_argument(
        "--api-keys",
        choices=("off", "on", "limited"),
        default="off",
        help="off: no key file (the default gateway); on: a key file, every gateway request "
        "carries a valid key; limited: that key also has request and token limits (never "
        "reached: the Redis round trip, the prompt-token count and the output-token charge "
        "are paid on every request)",
    )
    p.add_argument("--json", default=None, metavar="OUT")
    args = p.parse_args(argv)
    return asyncio.run(_main(args))


def _key_env(args: argparse.Namespace, directory: str) -> dict[str, str]:
    """The gateway's key-file settings for ``--api-keys``; sets ``args.client_key``."""
    from services.gateway.api_keys import KeyPolicy, RateLimit, dump_key_file, new_api_key

    args.client_key = None
    if args.api_keys == "off":
        return {}
    policy = KeyPolicy()
    if args.api_keys == "limited":  # far above the offered load: checked, never refused
        policy = KeyPolicy(requests=RateLimit(10**7, 10**7), tokens=RateLimit(10**9, 10**9))
    rec, args.client_key = new_api_key("bench", policy)
    path = os.path.join(directory, "keys.yaml")
    with open(path, "w") as f:
        f.write(dump_key_file([rec]))
    return {"HEADROOM_GATEWAY_API_KEYS_PATH": path, "HEADROOM_GATEWAY_POD_AUTH": "none"}


async def _main(args: argparse.Namespace) -> int:
    from services.launcher import Stack, StackConfig
    from shared import embedded
    from shared.subjects import Names

    names = Names(f"benchgw-{uuid.uuid4().hex[:8]}")
    started = []
    nats_url, s = embedded.ensure("nats", args.nats_url)
    started += [s] if s else []
    redis_url, s = embedded.ensure("redis", args.redis_url)
    started += [s] if s else []
    stack = None
    keys_dir = tempfile.TemporaryDirectory(prefix="headroom-bench-keys-")
    gateway_env = {"HEADROOM_GATEWAY_PROFILE": args.profile, **_key_env(args, keys_dir.name)}
    try:
        version = await publish_model(redis_url, names, pod_neutral=not args.real_model)
        config = StackConfig(
            nats_url=nats_url, redis_url=redis_url, namespace=names.namespace,
            pool=f"bench{uuid.uuid4().hex[:6]}", gateway_port=embedded.free_port(),
            pods=args.pods, predictors=1, log_level="WARNING",
            env={"trainer": {"HEADROOM_TRAINER_MIN_SAMPLES": "100000000"},
                 "gateway": gateway_env,
                 **json.loads(os.environ.get("HEADROOM_BENCH_EXTRA_ENV", "{}"))},
        )  # fmt: skip
        stack = Stack(config, log=lambda line: None)
        await asyncio.to_thread(stack.start)
        result = await measure(args, stack)
        result["model_version_published"] = version
    finally:
        if stack is not None:
            await asyncio.to_thread(stack.stop)
        await delete_namespace(redis_url, names)
        keys_dir.cleanup()
        for srv in started:
            srv.stop()
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
