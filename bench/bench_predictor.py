"""Prediction hot-path benchmark: routing decisions through the real gateway client
(coalescer + binary wire format) and real NATS to predictor processes.

    headroom bench predictor --spawn --candidates 100 [--concurrency C] [--duration S]
                             [--rate R] [--replicas N] --json OUT

``--spawn`` starts NATS/Redis if none is reachable, publishes a model (XGBoost, 200 trees of
depth 6, fitted here on synthetic rows) under a fresh namespace, starts ``--replicas``
predictor processes pinned to CPU ``--predictor-cpu`` (replica i on cpu + i, modulo the CPU
count) and pins this load generator to ``--client-cpu``. Without ``--spawn`` it drives the
predictors already serving ``--namespace``.

Closed loop (default): ``--concurrency`` workers each send a decision, wait, repeat.
Open loop (``--rate R``): Poisson arrivals at R decisions/s, latency measured from each
decision's scheduled arrival (so a lagging generator counts against the result).

Prints (and writes to ``--json``) decisions_per_s, rows_per_s, latency_ms {p50,p90,p99},
fallbacks (+ by reason), predictor CPU seconds per second, coalescing and the load average.
Every loop is bounded in time and count; loopback only. Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

import numpy as np

from shared.features import PodLoad, build_row

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------
# helpers shared with bench_gateway
# --------------------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds (from /proc/<pid>/stat)."""
    user, system = proc_cpu_split_s(pid)
    return user + system


def proc_cpu_split_s(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process, seconds: user space and kernel (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) / CLK_TCK, int(parts[12]) / CLK_TCK


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 3) if xs else None


def latency_summary(ms: list[float]) -> dict:
    return {"p50": pct(ms, 50), "p90": pct(ms, 90), "p99": pct(ms, 99), "max": pct(ms, 100)}


async def publish_model(
    redis_url: str,
    names,
    *,
    samples: int = 4000,
    seed: int = 0,
    pod_neutral: bool = False,
    trees: int = 200,
    depth: int = 6,
) -> str:
    """Fit TTFT/TPOT models (``trees`` trees of ``depth``, llm-d's 200 x 6 by default) on
    synthetic samples and publish them as the current version of ``names``; returns the
    version id. ``pod_neutral``: labels depend on the prompt length only, so every
    candidate of a decision gets the same prediction (full-size trees, but routing spreads
    like round robin: for overhead measurements)."""
    from bench.bench_trainer import synthetic
    from services.trainer.cycle import build_meta, run_cycle
    from services.trainer.fitting import FitConfig, TrainingData
    from shared.bus import connect_redis
    from shared.model_store import next_version, publish_version

    cfg = FitConfig(rounds=trees, max_depth=depth)
    rows = synthetic(samples, seed=seed)
    if pod_neutral:
        for smp in rows:
            smp.ttft_ms = 25.0 + 0.02 * smp.input_tokens
            smp.tpot_ms = 7.0 + 0.0005 * smp.input_tokens
    data = TrainingData.from_samples(rows)
    result = await asyncio.to_thread(run_cycle, data, None, cfg)
    r = connect_redis(redis_url)
    try:
        version = await next_version(r, names)
        meta, blobs = build_meta(version, time.time(), result, cfg)
        await publish_version(r, names, meta, blobs)
    finally:
        await r.aclose()
    return version


async def delete_namespace(redis_url: str, names) -> None:
    from shared.bus import connect_redis
    from shared.model_store import delete_namespace as _delete

    r = connect_redis(redis_url)
    try:
        await _delete(r, names)
    finally:
        await r.aclose()


def health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


@dataclass
class Predictors:
    procs: list[subprocess.Popen] = field(default_factory=list)
    health_urls: list[str] = field(default_factory=list)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def spawn_predictors(
    n: int, nats_url: str, redis_url: str, namespace: str, first_cpu: int | None, version: str
) -> Predictors:
    """Start ``n`` predictor processes (pinned when ``first_cpu`` is set) and wait until each
    serves ``version``."""
    from shared.embedded import free_port

    out = Predictors()
    ncpu = os.cpu_count() or 1
    for i in range(n):
        port = free_port()
        env = {
            **os.environ,
            "HEADROOM_NATS_URL": nats_url,
            "HEADROOM_REDIS_URL": redis_url,
            "HEADROOM_NAMESPACE": namespace,
            "HEADROOM_LOG_LEVEL": "WARNING",
            "HEADROOM_PREDICTOR_ADMIN_PORT": str(port),
            "HEADROOM_PREDICTOR_REPLICA_ID": f"bench-{i}",
        }
        cpu = None if first_cpu is None else (first_cpu + i) % ncpu

        def pin(cpu=cpu) -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        out.procs.append(
            subprocess.Popen([sys.executable, "-m", "services.predictor"], env=env, preexec_fn=pin)
        )
        out.health_urls.append(f"http://127.0.0.1:{port}/health")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in out.procs):
            out.stop()
            raise RuntimeError("a predictor exited during startup")
        if all((h := health(u)) and h.get("model_version") == version for u in out.health_urls):
            return out
        time.sleep(0.1)
    out.stop()
    raise RuntimeError("predictors did not load the model within 60 s")


# --------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------
def decision_rows(candidates: int, n: int = 64, seed: int = 0) -> list[np.ndarray]:
    """``n`` decisions of ``candidates`` feature rows each (varied pod loads and prompts)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tokens = int(rng.lognormvariate(7.0, 1.0)) + 1
        rows = []
        for _ in range(candidates):
            running = rng.randint(0, 128)
            load = PodLoad(
                waiting=rng.choice([0, 0, 0, 1, 2, 5]),
                running=running,
                kv_usage=min(1.0, running / 160 + rng.random() * 0.2),
                prefill_tokens_in_flight=rng.randint(0, 8000),
                decode_tokens_in_flight=rng.randint(0, 20000),
            )
            rows.append(build_row(tokens, rng.choice([0.0, 0.3, 0.6, 0.95]), load))
        out.append(np.asarray(rows, dtype=np.float32))
    return out


@dataclass
class Result:
    latencies_ms: list[float] = field(default_factory=list)
    fallbacks: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def record(self, ms: float, reason: str | None) -> None:
        self.latencies_ms.append(ms)
        if reason is not None:
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1


async def closed_loop(client, decisions, concurrency, duration_s, timeout_s, res: Result) -> None:
    stop_at = time.perf_counter() + duration_s
    max_each = int(duration_s * 20_000) + 1  # bound on count per worker

    async def worker(w: int) -> None:
        for i in range(max_each):
            if time.perf_counter() >= stop_at:
                return
            t0 = time.perf_counter()
            out = await client.predict(decisions[(w + i) % len(decisions)], timeout_s=timeout_s)
            res.record((time.perf_counter() - t0) * 1e3, out.reason)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))


async def open_loop(client, decisions, rate, duration_s, timeout_s, res: Result) -> None:
    rng = np.random.default_rng(0)
    n = int(rate * duration_s)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    start = time.perf_counter()
    tasks: set[asyncio.Task] = set()
    max_outstanding = 20_000

    async def one(i: int, due: float) -> None:
        out = await client.predict(decisions[i % len(decisions)], timeout_s=timeout_s)
        res.record((time.perf_counter() - due) * 1e3, out.reason)

    i = 0
    while i < n:
        now = time.perf_counter() - start
        while i < n and arrivals[i] <= now:
            if len(tasks) >= max_outstanding:
                res.dropped += 1
            else:
                t = asyncio.create_task(one(i, start + arrivals[i]))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            i += 1
        if i < n:
            await asyncio.sleep(max(0.0, arrivals[i] - (time.perf_counter() - start)))
    if tasks:
        await asyncio.wait(list(tasks), timeout=timeout_s + 5)


async def run_load(
    args: argparse.Namespace, nats_url: str, namespace: str, pids: list[int]
) -> dict:
    from services.gateway.breaker import BreakerConfig
    from services.gateway.coalescer import CoalescerConfig
    from services.gateway.predictor_client import PredictorClient
    from shared.bus import connect_nats
    from shared.subjects import Names

    names = Names(namespace)
    nc = await connect_nats(nats_url, "bench-predictor")
    cfg = CoalescerConfig(args.window_ms / 1000, args.max_rows, args.max_in_flight)
    client = PredictorClient(
        nc, names.predict, args.timeout_ms / 1000, coalescer=cfg, wire_format=args.wire,
        breaker=BreakerConfig(failures=0),  # measure every call, never skip under overload
    )  # fmt: skip
    decisions = decision_rows(args.candidates)
    timeout_s = args.timeout_ms / 1000
    try:
        # warm-up (connections, caches, first batches), not measured
        await closed_loop(client, decisions, min(args.concurrency, 8), 1.0, timeout_s, Result())
        gc.collect()
        gc.freeze()  # the generator's own full collections stay out of the measurement
        res = Result()
        co = client.coalescer.stats
        calls0, batches0 = co.calls, co.batches
        cpu0 = [proc_cpu_s(p) for p in pids]
        own0 = proc_cpu_s(os.getpid())
        load0 = loadavg()
        t0 = time.perf_counter()
        if args.rate:
            await open_loop(client, decisions, args.rate, args.duration, timeout_s, res)
        else:
            await closed_loop(client, decisions, args.concurrency, args.duration, timeout_s, res)
        elapsed = time.perf_counter() - t0
        cpu1 = [proc_cpu_s(p) for p in pids]
        own = proc_cpu_s(os.getpid()) - own0
        calls, batches = co.calls - calls0, co.batches - batches0
    finally:
        await client.close()
        await nc.drain()
    n = len(res.latencies_ms)
    return {
        "mode": "open" if args.rate else "closed",
        "candidates": args.candidates,
        "concurrency": None if args.rate else args.concurrency,
        "rate": args.rate,
        "duration_s": round(elapsed, 3),
        "replicas": args.replicas,
        "decisions": n,
        "decisions_per_s": round(n / elapsed, 1),
        "rows_per_s": round(n * args.candidates / elapsed, 1),
        "latency_ms": latency_summary(res.latencies_ms),
        "fallbacks": sum(res.fallbacks.values()),
        "fallback_reasons": res.fallbacks,
        "dropped": res.dropped,
        "predictor_cpu_s_per_s": [
            round((b - a) / elapsed, 3) for a, b in zip(cpu0, cpu1, strict=True)
        ],
        "client_cpu_s_per_s": round(own / elapsed, 3),
        "decisions_per_batch": round(calls / batches, 2) if batches else None,
        "model": {"trees": args.trees, "depth": args.depth},
        "coalescer": {
            "window_ms": args.window_ms,
            "max_rows": args.max_rows,
            "max_in_flight": args.max_in_flight,
            "wire": args.wire,
        },
        "loadavg_before": load0,
        "loadavg_after": loadavg(),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spawn", action="store_true", help="start predictors (and NATS/Redis)")
    p.add_argument("--candidates", type=int, default=100, help="rows per decision")
    p.add_argument("--concurrency", type=int, default=64, help="closed-loop workers")
    p.add_argument("--duration", type=float, default=10.0, help="seconds measured")
    p.add_argument("--rate", type=float, default=None, help="open loop: decisions/s offered")
    p.add_argument("--replicas", type=int, default=1, help="predictors to spawn")
    p.add_argument("--predictor-cpu", type=int, default=0, help="CPU of the first predictor")
    p.add_argument("--client-cpu", type=int, default=1, help="CPU of this load generator")
    p.add_argument("--no-pin", action="store_true", help="do not pin any process")
    p.add_argument("--timeout-ms", type=float, default=100.0, help="per-decision deadline")
    p.add_argument("--window-ms", type=float, default=1.0, help="coalescing window (0: off)")
    p.add_argument("--max-rows", type=int, default=2048, help="rows per coalesced request")
    p.add_argument("--max-in-flight", type=int, default=8, help="coalesced requests in flight")
    p.add_argument("--wire", choices=("binary", "json"), default="binary")
    p.add_argument(
        "--trees",
        type=int,
        default=200,
        help="with --spawn: trees per model (1 with --depth 1: the round trip without inference)",
    )
    p.add_argument("--depth", type=int, default=6, help="with --spawn: tree depth")
    p.add_argument(
        "--nats-url", default=os.environ.get("HEADROOM_NATS_URL", "nats://127.0.0.1:4222")
    )
    p.add_argument(
        "--redis-url", default=os.environ.get("HEADROOM_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    p.add_argument("--namespace", default=None, help="without --spawn: predictors' namespace")
    p.add_argument("--json", default=None, metavar="OUT", help="write the result here")


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="headroom bench predictor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add_arguments(p)
    args = p.parse_args(argv)
    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    from shared import embedded
    from shared.subjects import Names

    started: list = []
    predictors: Predictors | None = None
    nats_url, redis_url = args.nats_url, args.redis_url
    namespace = args.namespace or "headroom"
    try:
        if args.spawn:
            nats_url, s = embedded.ensure("nats", nats_url)
            started += [s] if s else []
            redis_url, s = embedded.ensure("redis", redis_url)
            started += [s] if s else []
            namespace = args.namespace or f"bench-{uuid.uuid4().hex[:8]}"
            version = await publish_model(
                redis_url, Names(namespace), trees=args.trees, depth=args.depth
            )
            cpu = None if args.no_pin else args.predictor_cpu
            predictors = await asyncio.to_thread(
                spawn_predictors, args.replicas, nats_url, redis_url, namespace, cpu, version
            )
        if not args.no_pin:
            os.sched_setaffinity(0, {args.client_cpu % (os.cpu_count() or 1)})
        pids = [pr.pid for pr in predictors.procs] if predictors else []
        result = await run_load(args, nats_url, namespace, pids)
    finally:
        if predictors is not None:
            predictors.stop()
        if args.spawn:
            with contextlib.suppress(Exception):
                await delete_namespace(redis_url, Names(namespace))
        for s in started:
            s.stop()
    write_result(result, args.json)
    return 0


def write_result(result: dict, path: str | None) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
