"""`headroom bench soak`: many concurrent streaming clients through one gateway for minutes;
does the gateway keep serving without errors, and does its memory stay flat?

Starts a stack through the dev launcher (services/launcher.py) on its own NATS and Redis
(embedded, free loopback ports): ``--pods`` simulated pods, 2 predictors, the trainer, the
collector and ONE gateway. ``--concurrency`` client workers each send a streaming
completion, read it to ``[DONE]``, and send the next, until ``--duration-s`` is over (closed
loop: that many requests in flight at all times). The gateway process is measured from
outside (/proc): RSS at start (stack up, no load), after ``--warm-s`` of load ("warm"), and
at the end of the load; open file descriptors at start and at the end (after the clients
closed their connections). Per-request memory growth = (end - warm RSS) / requests
completed between the two. A service that exits is not restarted (a crash shows as
errors). Prints JSON (``--json OUT``) and a summary; loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import orjson

from bench.faults.report import percentile
from bench.lab.synthetic import write_mooncake_trace
from bench.replay import check_loopback
from bench.traces import read_trace
from services.launcher import DEFAULT_MODEL, Stack, StackConfig
from shared import embedded


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom bench soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--concurrency", type=int, default=1000, help="streams in flight")
    p.add_argument("--duration-s", type=float, default=300.0, help="load duration")
    p.add_argument("--warm-s", type=float, default=None,
                   help="load before the 'warm' RSS reading (default: 20%% of the duration)")  # fmt: skip
    p.add_argument("--pods", type=int, default=8, help="simulated pods")
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per answer (at most)")
    p.add_argument("--prompt-blocks", type=int, default=1,
                   help="512-token blocks per prompt (at most; the prompts cycle over 2,000)")  # fmt: skip
    p.add_argument("--request-timeout-s", type=float, default=None,
                   help="a client gives up after this (default: the profile's flow-control "
                   "maxWaitS, the longest the gateway may hold a request, plus 60 s)")  # fmt: skip
    p.add_argument("--profile", default="headroom",
                   help="the gateway's scheduling profile (default: the shipped default)")  # fmt: skip
    p.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                   help="diagnostics: the gateway traces allocations (FRAMES deep; slows it) "
                   "and the report gets the sites that grew from the warm reading to after the "
                   "clients closed (HEADROOM_GATEWAY_DEBUG_TRACEMALLOC)")  # fmt: skip
    p.add_argument("--sample-every-s", type=float, default=5.0, help="RSS series interval")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", help="write the report here (default: stdout)")
    p.add_argument("--log", metavar="FILE", help="the stack's logs (default: OUT.log)")
    return p


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Load:
    def __init__(self, url: str, bodies: list[bytes], timeout_s: float) -> None:
        self.url = check_loopback(url) + "/v1/completions"
        self.bodies = bodies
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.completed = 0
        self.errors: dict[str, int] = {}
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    def _error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    async def worker(self, i: int, session: aiohttp.ClientSession, stop_at: float) -> None:
        n = 0
        while time.monotonic() < stop_at:
            body = self.bodies[(i * 7919 + n) % len(self.bodies)]
            n += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            t0 = time.perf_counter()
            try:
                await self._one(session, body, t0)
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                self._error(type(e).__name__)
            finally:
                self.in_flight -= 1

    async def _one(self, session: aiohttp.ClientSession, body: bytes, t0: float) -> None:
        async with session.post(self.url, data=body,
                                headers={"content-type": "application/json"}) as r:  # fmt: skip
            if r.status != 200:
                self._error(f"status_{r.status}:{_error_code(await r.read())}")
                return
            first = None
            async for raw in r.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    if first is None:
                        self._error("no_token")
                        return
                    self.completed += 1
                    now = time.perf_counter()
                    self.ttft.append(first - t0)
                    self.e2e.append(now - t0)
                    return
                if first is None:
                    ev = orjson.loads(payload)
                    if "error" in ev:
                        self._error(f"error_event:{_error_code(payload)}")
                        return
                    if any(c.get("text") for c in ev.get("choices") or ()):
                        first = time.perf_counter()
                elif payload.startswith(b'{"error"'):
                    self._error(f"error_event_mid_stream:{_error_code(payload)}")
                    return
            self._error("stream_ended_early")


def _error_code(body: bytes) -> str:
    """The gateway's reason in an OpenAI-style error body (its ``code``, else ``type``)."""
    try:
        err = orjson.loads(body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "unparsed"
    return str(err.get("code") or err.get("type") or "none") if isinstance(err, dict) else "none"


def client_timeout_s(args) -> float:
    """The client's patience: given, or the longest the profile's flow control may hold a
    request (``maxWaitS``) plus 60 s to be served, so a client only gives up on a request the
    gateway failed to release, never on one it is allowed to hold."""
    if args.request_timeout_s is not None:
        return args.request_timeout_s
    from services.gateway.scheduling.config import load_config

    flow = load_config().flow(args.profile)
    return (flow.max_wait_s if flow.enabled else 0.0) + 60.0


async def run_soak(args, log_path: Path) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="headroom-soak-"))
    trace = read_trace(write_mooncake_trace(tmp / "trace.jsonl", 2000, seed=args.seed,
                                            max_blocks=args.prompt_blocks,
                                            output=(4, args.max_tokens)),
                       seed=args.seed)  # fmt: skip
    bodies = [orjson.dumps({"model": DEFAULT_MODEL, "prompt": r.prompt_text(), "stream": True,
                            "max_tokens": max(4, min(r.output_tokens, args.max_tokens)),
                            "stream_options": {"include_usage": True}})
              for r in trace.requests]  # fmt: skip
    log_file = log_path.open("w")
    config = StackConfig(
        nats_url=f"nats://127.0.0.1:{embedded.free_port()}",  # nothing there: embedded ones
        redis_url=f"redis://127.0.0.1:{embedded.free_port()}/0",
        namespace=f"soak-{uuid.uuid4().hex[:8]}", gateway_port=embedded.free_port(),
        pods=args.pods, predictors=2, gateways=1, log_level="WARNING", restart=False,
        env={"trainer": {"HEADROOM_TRAINER_INTERVAL_S": "10",
                         "HEADROOM_TRAINER_MIN_SAMPLES": "100"},
             "gateway": {"HEADROOM_GATEWAY_PROFILE": args.profile,
                         "HEADROOM_GATEWAY_DEBUG_TRACEMALLOC": str(args.tracemalloc)}},
    )  # fmt: skip
    stack = Stack(config, log=lambda line: print(line, file=log_file, flush=True))
    load_avg = [os.getloadavg()]
    try:
        await asyncio.to_thread(stack.start)
        gw = stack.child("gateway").proc.pid
        await asyncio.sleep(2.0)
        start = {"rss_mb": rss_mb(gw), "open_fds": open_fds(gw), "cpu_s": cpu_s(gw)}
        timeout_s = client_timeout_s(args)
        load = Load(stack.gateway_url, bodies, timeout_s)
        warm_s = args.warm_s if args.warm_s is not None else 0.2 * args.duration_s
        series: list[dict] = []
        t0 = time.monotonic()
        stop_at = t0 + args.duration_s
        conn = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(connector=conn, timeout=load.timeout) as session:
            workers = [asyncio.create_task(load.worker(i, session, stop_at))
                       for i in range(args.concurrency)]  # fmt: skip
            warm = None
            tm_mark = None
            while time.monotonic() < stop_at:
                await asyncio.sleep(min(args.sample_every_s, max(0.0, stop_at - time.monotonic())))
                el = time.monotonic() - t0
                point = {"t_s": round(el, 1), "rss_mb": rss_mb(gw), "open_fds": open_fds(gw),
                         "completed": load.completed, "in_flight": load.in_flight,
                         "errors": sum(load.errors.values()),
                         **await asyncio.to_thread(_gateway_gauges, stack.gateway_url)}  # fmt: skip
                series.append(point)
                if warm is None and el >= warm_s:
                    warm = point
                    if args.tracemalloc:
                        tm_mark = await _debug(session, stack.gateway_url, "POST", "mark")
                if stack.failed_child() is not None:
                    load._error(f"{stack.failed_child().name}_exited")
                    break
            end_load = {"rss_mb": rss_mb(gw), "open_fds": open_fds(gw),
                        "completed": load.completed, "cpu_s": cpu_s(gw),
                        **await asyncio.to_thread(_gateway_gauges, stack.gateway_url)}  # fmt: skip
            _, pending = await asyncio.wait(workers, timeout=timeout_s + 10)
            for t in pending:
                t.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        await asyncio.sleep(2.0)  # the gateway closes the client connections it held
        after = {"rss_mb": rss_mb(gw), "open_fds": open_fds(gw)}
        tm = None
        if args.tracemalloc:  # what stayed allocated from the warm reading to now
            async with aiohttp.ClientSession() as s:
                tm = await _debug(s, stack.gateway_url, "GET", "?top=25")
            tm["at_mark"] = tm_mark
        counters = await asyncio.to_thread(_gateway_counters, stack.gateway_url)
        load_avg.append(os.getloadavg())
        warm = warm or series[0]
        grown = end_load["rss_mb"] - warm["rss_mb"]
        reqs = max(1, end_load["completed"] - warm["completed"])
        wall = time.monotonic() - t0
        return {
            "bench": "soak",
            "concurrency": args.concurrency,
            "peak_in_flight": load.peak_in_flight,
            "duration_s": args.duration_s,
            "pods": args.pods,
            "profile": args.profile,
            "requests": load.completed,
            "errors": sum(load.errors.values()),
            "errors_by_kind": load.errors,
            "requests_per_s": round(load.completed / wall, 1),
            "ttft_ms": {"p50": _ms(percentile(load.ttft, 50)), "p99": _ms(percentile(load.ttft, 99))},
            "e2e_ms": {"p50": _ms(percentile(load.e2e, 50)), "p99": _ms(percentile(load.e2e, 99))},
            "rss_mb": {"start": start["rss_mb"], "warm": warm["rss_mb"], "end": end_load["rss_mb"],
                       "after_clients_closed": after["rss_mb"]},
            "rss_growth_warm_to_end": round(grown / warm["rss_mb"], 4),
            "rss_growth_bytes_per_request": round(grown * 1024 * 1024 / reqs, 1),
            # the prefix index fills towards its bound (~140 B per block): growth, not a leak
            "prefix_index_blocks": {"warm": warm.get("prefix_blocks"),
                                    "end": end_load.get("prefix_blocks"),
                                    "capacity": end_load.get("prefix_capacity")},
            "rss_growth_beyond_prefix_index_mb": round(
                grown - PREFIX_BLOCK_BYTES * ((end_load.get("prefix_blocks") or 0)
                                              - (warm.get("prefix_blocks") or 0)) / 2**20, 2),
            "open_fds": {"start": start["open_fds"], "end": after["open_fds"],
                         "at_end_of_load": end_load["open_fds"]},
            "gateway_cpu_s": round(end_load["cpu_s"] - start["cpu_s"], 1),
            "gateway_cpu_ms_per_request": round(
                (end_load["cpu_s"] - start["cpu_s"]) * 1000 / max(1, load.completed), 3),
            "client_timeout_s": timeout_s,
            "gateway_counters": counters,
            "tracemalloc": tm,
            "series": series,
            "loadavg": {"start": [round(x, 2) for x in load_avg[0]],
                        "end": [round(x, 2) for x in load_avg[-1]], "cpus": os.cpu_count()},
            "passed": sum(load.errors.values()) == 0 and grown / warm["rss_mb"] < 0.10,
            "log": str(log_path),
        }  # fmt: skip
    finally:
        await asyncio.to_thread(stack.stop)
        log_file.close()


async def _debug(session: aiohttp.ClientSession, url: str, method: str, what: str) -> dict:
    sep = "/" if not what.startswith("?") else ""
    async with session.request(method, f"{url}/debug/tracemalloc{sep}{what}",
                               timeout=aiohttp.ClientTimeout(total=120)) as r:  # fmt: skip
        return await r.json()


PREFIX_BLOCK_BYTES = 141  # one block of the prefix index (an OrderedDict entry and its int)


def _gateway_gauges(url: str) -> dict[str, float]:
    """The prefix index's size and bound and the flow-control queue, from /metrics; {} when
    the scrape fails or times out (a gateway slowed by ``--tracemalloc`` under 1,000 streams:
    the point keeps its RSS and descriptors, the soak goes on)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:  # URLError, TimeoutError
        return {}
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.name == "headroom_gateway_prefix_index_blocks":
                key = "prefix_blocks" if s.labels.get("kind") == "held" else "prefix_capacity"
                out[key] = s.value
            elif fam.name == "headroom_gateway_queued_requests":
                out["queued"] = out.get("queued", 0) + s.value
    return out


def _gateway_counters(url: str) -> dict[str, float]:
    """The gateway's failure, retry and ejection counters by label, from its /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    wanted = ("headroom_gateway_requests_failed", "headroom_gateway_retries",
              "headroom_gateway_pod_ejections", "headroom_gateway_routing",
              "headroom_gateway_requests", "headroom_gateway_queue_rejected",
              "headroom_gateway_queue_wait_seconds", "headroom_gateway_client_disconnects",
              "headroom_gateway_requests_shed", "headroom_gateway_limit_rejections",
              "headroom_gateway_samples_failed", "headroom_gateway_gc_pause_seconds")  # fmt: skip
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in wanted:
            for s in fam.samples:
                if s.name.endswith(("_total", "_count")):
                    labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                    out[f"{fam.name}{{{labels}}}"] = s.value
    return out


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 1)


def human(r: dict) -> str:
    tm = r.get("tracemalloc")
    if tm:
        grown = tm["traced_bytes"] - tm.get("traced_bytes_at_mark", tm["traced_bytes"])
        sites = "; ".join(
            f"{t['size_diff_bytes'] / 1e3:+.0f} kB {t['at'][-1]}" for t in tm["top"][:5]
        )
        tail = f"\ntracemalloc warm -> after: {grown / 1e6:+.2f} MB traced; top: {sites}"
    else:
        tail = ""
    return _human(r) + tail


def _human(r: dict) -> str:
    return (
        f"soak: {r['concurrency']} streams (peak {r['peak_in_flight']}) for {r['duration_s']:g} s "
        f"through one gateway to {r['pods']} pods: {r['requests']} requests "
        f"({r['requests_per_s']}/s), {r['errors']} errors {r['errors_by_kind'] or ''}; "
        f"TTFT p50/p99 {r['ttft_ms']['p50']}/{r['ttft_ms']['p99']} ms; gateway RSS "
        f"{r['rss_mb']['start']} -> {r['rss_mb']['warm']} (warm) -> {r['rss_mb']['end']} MB "
        f"(+{100 * r['rss_growth_warm_to_end']:.1f}% warm to end, "
        f"{r['rss_growth_bytes_per_request']} B/request); fds {r['open_fds']['start']} -> "
        f"{r['open_fds']['at_end_of_load']} (load end) -> {r['open_fds']['end']}; gateway CPU "
        f"{r['gateway_cpu_ms_per_request']} ms/request; load average {r['loadavg']['start'][0]}"
        f" -> {r['loadavg']['end'][0]} on {r['loadavg']['cpus']} CPUs; passed: {r['passed']}"
    )


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.concurrency < 1 or args.duration_s <= 0:
        print("headroom bench soak: --concurrency >= 1 and --duration-s > 0", file=sys.stderr)
        return 2
    log_path = Path(args.log) if args.log else Path((args.json or "bench-soak") + ".log")
    try:
        report = asyncio.run(run_soak(args, log_path))
    except RuntimeError as e:
        print(f"headroom bench soak: {e} (stack logs: {log_path})", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    print(human(report), file=sys.stderr)
    return 0
