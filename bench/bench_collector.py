"""Collector performance: N pods scraped every interval by one collector, CPU measured.

A child process serves N fake model-server pods on 127.0.0.1 (one port each, realistic vLLM V1
pages: process metrics, ~20 histograms, info gauges, two engines; ~500 lines and ~50 KB per
page, values changing every request). This process runs the real collector loop
(:class:`services.collector.service.Collector` with the real scraper, parser, snapshot
encoding and autoscaling gauges; publication is a no-op after encoding, so no NATS is needed)
for ``--duration-s`` and measures its own CPU with ``time.process_time()`` (user + system of
this process only; the pod server's CPU is the child's).

    .venv/bin/python -m bench.bench_collector               # 100 pods, 100 ms, 20 s
    .venv/bin/python -m bench.bench_collector --pods 200 --duration-s 10 --engine jetstream

Prints one JSON object and a human summary. The goal (issue 6): 100 pods every 100 ms using
at most half a core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import statistics
import sys
import time

import aiohttp
from aiohttp import web

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_HISTS = {
    "time_to_first_token_seconds": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
    "inter_token_latency_seconds": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
    "e2e_request_latency_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0],
    "request_queue_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0],
    "request_prefill_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0],
    "request_decode_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0],
    "request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
    "request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    "iteration_tokens_total": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
}  # fmt: skip
_JS_GAUGES = ("jetstream_transfer_backlog_size", "jetstream_generate_backlog_size")


def vllm_page(rng: random.Random, engines: int = 2) -> str:
    out = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        *(f'python_gc_objects_collected_total{{generation="{g}"}} {rng.randint(1, 9999)}.0'
          for g in range(3)),
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {rng.uniform(10, 9999):.2f}",
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {rng.randint(10**9, 10**10)}.0",
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'gpu_memory_utilization="0.9",num_gpu_blocks="26000"} 1.0',
    ]  # fmt: skip
    for e in range(engines):
        lab = f'engine="{e}",model_name="{MODEL}"'
        out += [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {rng.randint(0, 128)}.0",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {rng.randint(0, 20)}.0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {rng.random():.6f}",
            "# TYPE vllm:prefix_cache_queries counter",
            f"vllm:prefix_cache_queries_total{{{lab}}} {rng.randint(10**6, 10**7)}.0",
            f"vllm:prefix_cache_queries_created{{{lab}}} 1.7281e+09",
            "# TYPE vllm:prefix_cache_hits counter",
            f"vllm:prefix_cache_hits_total{{{lab}}} {rng.randint(10**5, 10**6)}.0",
            f"vllm:num_preemptions_total{{{lab}}} {rng.randint(0, 99)}.0",
            f"vllm:prompt_tokens_total{{{lab}}} {rng.randint(10**6, 10**8)}.0",
            f"vllm:generation_tokens_total{{{lab}}} {rng.randint(10**6, 10**8)}.0",
        ]
        for reason in ("stop", "length", "abort"):
            out.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} '
                       f"{rng.randint(0, 10**5)}.0")  # fmt: skip
        for name, buckets in _HISTS.items():
            out += [f"# HELP vllm:{name} Histogram.", f"# TYPE vllm:{name} histogram"]
            n = 0
            for le in buckets:
                n += rng.randint(0, 50)
                out.append(f'vllm:{name}_bucket{{{lab},le="{le}"}} {n}.0')
            out += [f'vllm:{name}_bucket{{{lab},le="+Inf"}} {n}.0',
                    f"vllm:{name}_count{{{lab}}} {n}.0",
                    f"vllm:{name}_sum{{{lab}}} {rng.uniform(0, 1e4):.4f}"]  # fmt: skip
    out.append('vllm:lora_requests_info{max_lora="4",running_lora_adapters="",'
               'waiting_lora_adapters=""} 1.7281e+09')  # fmt: skip
    return "\n".join(out) + "\n"


def jetstream_page(rng: random.Random) -> str:
    lab = 'id="bench",model_name="llama3_8b"'
    out = [f"jetstream_prefill_backlog_size{{{lab}}} {rng.randint(0, 20)}.0"]
    out += [f'{g}{{{lab},idx="0"}} {rng.randint(0, 4)}.0' for g in _JS_GAUGES]
    out += [f'jetstream_slots_used_percentage{{{lab},idx="{i}"}} {rng.random():.4f}'
            for i in range(4)]  # fmt: skip
    body = vllm_page(rng, 1).replace("vllm:", "jetstream_")  # similar histogram volume
    return body + "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------
# Child process: the pods
# --------------------------------------------------------------------------------------
def _serve_pods(n: int, engine: str, ports_out, stop_event) -> None:
    async def run() -> None:
        rng = random.Random(1)
        pages = [vllm_page(rng) if engine == "vllm" else jetstream_page(rng) for _ in range(32)]
        counter = 0

        async def metrics(_: web.Request) -> web.Response:
            nonlocal counter
            counter += 1
            return web.Response(text=pages[counter % len(pages)], content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ports = []
        for _ in range(n):
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=128)
            await site.start()
            ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        ports_out.send(ports)
        await asyncio.to_thread(stop_event.wait)
        await runner.cleanup()

    asyncio.run(run())


# --------------------------------------------------------------------------------------
# This process: the collector
# --------------------------------------------------------------------------------------
async def _collect(ports: list[int], args: argparse.Namespace) -> dict:
    from services.autoscale.signals import Recommender
    from services.collector.discovery import PodTarget, StaticDiscovery
    from services.collector.scraper import Scraper
    from services.collector.service import Collector
    from shared.schemas import PodSnapshot

    staleness: list[float] = []
    sizes: list[int] = []

    async def publish(snap: PodSnapshot) -> None:
        sizes.append(len(snap.encode()))
        staleness.append(max((snap.ts - p.scraped_at for p in snap.pods), default=0.0))

    targets = [PodTarget(f"pod-{i}", f"http://127.0.0.1:{p}") for i, p in enumerate(ports)]
    interval = args.interval_ms / 1000
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
        headers={"Accept": "text/plain;version=0.0.4"},
    ) as session:
        scraper = Scraper(session, engine=args.engine, timeout_s=1.0)
        collector = Collector(StaticDiscovery(targets), scraper, publish, pool="bench",
                              interval_s=interval, recommender=Recommender())  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(collector.run(stop))
        await asyncio.sleep(args.warmup_s)  # connections up, first cycles done
        c0, cycles0, n0 = time.process_time(), collector.cycles, len(staleness)
        w0 = time.perf_counter()
        await asyncio.sleep(args.duration_s)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        cycles = collector.cycles - cycles0
        snap = collector.last_snapshot
        stop.set()
        await task
    reg = collector.metrics.registry
    errors = sum(
        s.value
        for m in reg.collect()
        if m.name == "headroom_collector_scrape_errors"
        for s in m.samples
        if s.name.endswith("_total")
    )
    stale = sorted(staleness[n0:])
    return {
        "pods": len(ports),
        "engine": args.engine,
        "interval_ms": args.interval_ms,
        "duration_s": round(wall, 2),
        "cpu_s": round(cpu, 3),
        "cpu_cores": round(cpu / wall, 3),
        "cycles": cycles,
        "cycles_expected": round(wall / interval),
        "scrapes_per_s": round(cycles * len(ports) / wall),
        "scrape_errors": int(errors),
        "ready_in_last_snapshot": sum(1 for p in snap.pods if p.ready) if snap else 0,
        "max_record_age_ms_p50": round(1000 * statistics.median(stale), 1) if stale else None,
        "max_record_age_ms_p99": round(1000 * stale[int(0.99 * (len(stale) - 1))], 1)
        if stale
        else None,
        "snapshot_bytes": sizes[-1] if sizes else 0,
        "page_bytes": len(vllm_page(random.Random(0))) if args.engine == "vllm" else None,
        "goal_cpu_cores": 0.5,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=100)
    p.add_argument("--interval-ms", type=int, default=100)
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--engine", default="vllm", choices=["vllm", "jetstream"])
    args = p.parse_args(argv)

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    server = ctx.Process(target=_serve_pods, args=(args.pods, args.engine, send, stop))
    server.start()
    try:
        if not recv.poll(60):
            raise SystemExit("the pod server did not start")
        ports = recv.recv()
        result = asyncio.run(_collect(ports, args))
    finally:
        stop.set()
        server.join(10)
        if server.is_alive():
            server.terminate()
    print(json.dumps(result, indent=2))
    ok = result["cpu_cores"] <= 0.5 and result["cycles"] >= 0.9 * result["cycles_expected"]
    print(
        f"\n{result['pods']} {result['engine']} pods every {result['interval_ms']} ms for "
        f"{result['duration_s']} s: collector CPU {result['cpu_cores']:.2f} cores "
        f"(goal <= 0.5: {'met' if result['cpu_cores'] <= 0.5 else 'NOT met'}), "
        f"{result['cycles']}/{result['cycles_expected']} cycles, "
        f"{result['scrapes_per_s']} scrapes/s, {result['scrape_errors']} errors, "
        f"oldest record at publish p50 {result['max_record_age_ms_p50']} ms / "
        f"p99 {result['max_record_age_ms_p99']} ms."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
