"""`headroom bench faults`: what happens to clients, routing and training samples when a part
of Headroom fails, on a live stack of real processes.

The bench starts its own NATS (JetStream store in a temporary directory) and Redis on free
loopback ports, and a stack through the dev launcher (services/launcher.py: 4 simulated
pods, collector, 2 predictors, trainer, 2 gateway replicas; services that exit are
restarted). A client streams completions at a steady rate over both gateway replicas for
the whole run. After a warm-up (until the trainer's model routes requests) each scenario
(bench/faults/scenarios.py) runs in turn: ``--pre-s`` of normal traffic, the fault (held
``--hold-s``, or until the launcher respawned what was killed), then traffic until
predicted routing is back (at most ``--post-s``) plus ``--tail-s``. At the end the bench
waits for the trainer to take every sample and reads the stream and the trainer's window
(bench/faults/ledger.py). Prints JSON (``--json OUT``) and a table; exit 0 whatever the
verdicts (each scenario's ``passed`` says whether done-means 1 holds for it).

Loopback only; bounded: scenarios are sequential, each phase has a time limit, the client
caps requests in flight and each request's duration.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import aiohttp

from bench.faults.ledger import SampleLedger
from bench.faults.report import AFTER, BEFORE, FAULT, Timeline, sample_counts, summarize
from bench.faults.scenarios import Ctx, Scenario, all_scenarios
from bench.faults.traffic import Traffic
from bench.lab.synthetic import write_mooncake_trace
from bench.traces import read_trace
from services.launcher import DEFAULT_MODEL, Stack, StackConfig
from services.supervision import RestartPolicy
from shared import embedded
from shared.subjects import Names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom bench faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--json", metavar="OUT", help="write the report here (default: stdout)")
    p.add_argument("--rate", type=float, default=8.0, help="client requests per second")
    p.add_argument("--scenarios", help="comma-separated names (default: all)")
    p.add_argument("--pre-s", type=float, default=3.0, help="normal traffic before the fault")
    p.add_argument("--hold-s", type=float, default=5.0, help="how long a held fault lasts")
    p.add_argument("--post-s", type=float, default=15.0,
                   help="longest wait for predicted routing after the restore")  # fmt: skip
    p.add_argument("--tail-s", type=float, default=2.0, help="traffic after recovery")
    p.add_argument("--warmup-s", type=float, default=150.0, help="longest warm-up")
    p.add_argument("--profile", default=FAULTS_PROFILE,
                   help="the gateways' scheduling profile; one whose pods are ranked by the "
                   f"predictions (default {FAULTS_PROFILE}): the shipped `headroom` asks the "
                   "predictors only for sheddable SLO requests, so prediction faults would "
                   "not show")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", metavar="FILE", help="the stack's logs (default: OUT.log)")
    return p


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _predicted_share(recs, n: int) -> float:
    answered = [r for r in recs if r.path is not None][-n:]
    if len(answered) < n:
        return 0.0
    return sum(r.path == "predicted" for r in answered) / n


async def _until(cond, timeout_s: float, step: float = 0.1) -> bool:
    """Poll ``cond`` (sync, or async) until true or ``timeout_s`` passed."""

    async def check() -> bool:
        v = cond()
        return bool(await v) if asyncio.iscoroutine(v) else bool(v)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(step)
    return await check()


def _stack_healthy(stack: Stack) -> bool:
    ok = all(ch.proc.poll() is None and ch.healthy for ch in stack.children)
    if not ok:
        return False
    for url in stack.gateway_urls:
        try:
            body = json.loads(_get(url + "/health", 2.0))
        except (urllib.error.URLError, OSError, ValueError):
            return False
        if body.get("pods", {}).get("ready", 0) < len(stack.pod_urls):
            return False
    return True


async def run_scenario(sc: Scenario, ctx: Ctx, traffic: Traffic, args) -> Timeline:
    traffic.scenario, traffic.phase = sc.name, BEFORE
    await asyncio.sleep(args.pre_s)
    traffic.phase = FAULT
    fault_at = traffic.now()
    ctx.notes = {}
    await sc.inject(ctx)
    restore_at = await sc.restore(ctx)
    traffic.phase = AFTER

    def back() -> bool:
        return any(r.scenario == sc.name and r.sent >= restore_at and r.path == "predicted"
                   for r in traffic.records)  # fmt: skip

    await _until(back, args.post_s)
    await asyncio.sleep(args.tail_s)
    notes = {k: v for k, v in ctx.notes.items() if not k.startswith("_")}
    return Timeline(fault_at, restore_at, traffic.now(), notes)


async def settle(stack: Stack, traffic: Traffic, name: str, timeout_s: float = 60.0) -> bool:
    """Between scenarios: every service healthy, every pod ready, routing predicted."""
    traffic.scenario = f"settle:{name}"
    ok = await _until(lambda: asyncio.to_thread(_stack_healthy, stack), timeout_s, 0.25)
    predicted = await _until(lambda: _predicted_share(recs_now(traffic), 8) >= 0.75, timeout_s)
    return ok and predicted


def recs_now(traffic: Traffic):
    return [r for r in traffic.records if r.scenario == traffic.scenario]


# the scenarios measure the prediction path (fallbacks, time until predicted routing is back),
# so the gateways run a profile that asks the predictors for every request and ranks by them
FAULTS_PROFILE = "headroom-learned"


def stack_config(
    nats_url: str, redis_url: str, namespace: str, profile: str = FAULTS_PROFILE
) -> StackConfig:
    return StackConfig(
        nats_url=nats_url, redis_url=redis_url, namespace=namespace,
        gateway_port=embedded.free_port(), pods=4, predictors=2, gateways=2,
        log_level="WARNING", restart=True, check_namespace=False,
        restart_policy=RestartPolicy(initial_s=0.5, max_s=5.0, stable_s=20.0),
        env={
            "trainer": {
                # learn quickly from the bench's traffic; a window that never evicts, so
                # "never in the window" means lost; unacknowledged deliveries come back
                # after 10 s (30 s by default) to keep the run short
                "HEADROOM_TRAINER_INTERVAL_S": "2", "HEADROOM_TRAINER_MIN_SAMPLES": "60",
                "HEADROOM_TRAINER_MIN_NEW_SAMPLES": "30", "HEADROOM_TRAINER_ROUNDS": "40",
                "HEADROOM_TRAINER_WINDOW_SIZE": "500000", "HEADROOM_TRAINER_BUCKET_CAP": "500000",
                "HEADROOM_TRAINER_ACK_WAIT_S": "10", "HEADROOM_TRAINER_REPUBLISH_CHECK_S": "1",
            },
            "predictor": {"HEADROOM_PREDICTOR_RELOAD_INTERVAL_S": "1"},
            # a hung pod is given up on after 2 s (10 s by default)
            "gateway": {"HEADROOM_GATEWAY_POD_FIRST_BYTE_TIMEOUT_S": "2",
                        "HEADROOM_GATEWAY_PROFILE": profile},
        },
    )  # fmt: skip


async def run_bench(args, log_path: Path) -> dict:
    chosen = all_scenarios()
    if args.scenarios:
        wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        known = {s.name: s for s in chosen}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; known: {sorted(known)}")
        chosen = []
        for i, w in enumerate(wanted):  # a repeated scenario runs again under its own name
            n = wanted[:i].count(w)
            chosen.append(
                known[w] if n == 0 else dataclasses.replace(known[w], name=f"{w}#{n + 1}")
            )
    nats = embedded.start_nats()
    redis = embedded.start_redis()
    names = Names(f"bf-{uuid.uuid4().hex[:8]}")
    log_file = log_path.open("w")
    stack = Stack(stack_config(nats.url, redis.url, names.namespace, args.profile),
                  log=lambda line: print(line, file=log_file, flush=True))  # fmt: skip
    ledger = SampleLedger(nats.url, names)
    load_start = os.getloadavg()
    results: list[dict] = []
    t_start = time.perf_counter()
    try:
        await asyncio.to_thread(stack.start)
        await ledger.start()
        tmp = Path(tempfile.mkdtemp(prefix="headroom-faults-"))
        trace = read_trace(write_mooncake_trace(tmp / "trace.jsonl", 4000, seed=args.seed,
                                                max_blocks=6, output=(8, 64)), seed=args.seed)  # fmt: skip
        stop = asyncio.Event()
        async with (
            Traffic(stack.gateway_urls, trace, DEFAULT_MODEL, rate_rps=args.rate,
                    seed=args.seed) as traffic,
            aiohttp.ClientSession() as http,
        ):  # fmt: skip
            ledger.clock = traffic.now  # acks placed on the same clock as the requests
            sender = asyncio.create_task(traffic.run(stop))
            # warm-up: the trainer learns from this traffic until routing is predicted
            warm = await _until(
                lambda: _predicted_share(recs_now(traffic), 30) >= 0.9, args.warmup_s, 0.5
            )
            warmup_s = round(traffic.now(), 1)
            if not warm:
                raise RuntimeError(f"routing not predicted after {args.warmup_s} s of warm-up")
            ctx = Ctx(stack, nats, redis, http, traffic.now, hold_s=args.hold_s)
            timelines: list[tuple[Scenario, Timeline, bool]] = []
            for sc in chosen:
                settled = await settle(stack, traffic, sc.name)
                print(f"[faults] {sc.name} ...", file=sys.stderr, flush=True)
                tl = await run_scenario(sc, ctx, traffic, args)
                timelines.append((sc, tl, settled))
            traffic.scenario = "end"
            await settle(stack, traffic, "end")
            stop.set()
            await sender
            await traffic.drain()
        trained = await ledger.wait_trained()
        book, stats = await ledger.ledger(stack.admin_urls["trainer"])
        for sc, tl, settled in timelines:
            recs = [r for r in traffic.records if r.scenario == sc.name]
            s = summarize(sc.name, recs, tl, book, allowed_failures=sc.allowed_failures)
            s["settled_before"] = settled
            s["window_s"] = [round(tl.fault_at, 3), round(tl.end_at or 0.0, 3)]
            s["doc"] = sc.doc
            results.append(s)
        every = [r for r in traffic.records if r.scenario not in ("warmup",)]
        return {
            "bench": "faults",
            "scenarios": results,
            "passed": all(s["passed"] for s in results),
            "samples_overall": {
                **sample_counts(every, book),
                **stats,
                "trainer_caught_up": trained,
            },
            "requests_overall": len(every),
            "failed_overall": sum(1 for r in every if not r.ok),
            "rate_rps": args.rate,
            "warmup_s": warmup_s,
            "phases_s": {
                "pre": args.pre_s,
                "hold": args.hold_s,
                "post_max": args.post_s,
                "tail": args.tail_s,
            },
            "stack": {
                "pods": 4,
                "predictors": 2,
                "gateways": 2,
                "nats": "own, JetStream store",
                "redis": "own, no persistence",
            },
            "wall_s": round(time.perf_counter() - t_start, 1),
            "loadavg": {
                "start": [round(x, 2) for x in load_start],
                "end": [round(x, 2) for x in os.getloadavg()],
                "cpus": os.cpu_count(),
            },
            "log": str(log_path),
        }
    finally:
        await ledger.stop()
        await asyncio.to_thread(stack.stop)
        nats.stop()
        redis.stop()
        log_file.close()


def human(report: dict) -> str:
    head = (f"{'scenario':28} {'req':>5} {'fail':>5} {'excused':>7} {'lost':>4} {'dup':>4} "
            f"{'unacked':>7} {'recov_s':>7} {'ttft p50/p99 before':>20} {'during':>14}  ok")  # fmt: skip
    lines = [head, "-" * len(head)]
    for s in report["scenarios"]:
        b, d = s["ttft_ms"]["before"], s["ttft_ms"]["during"]
        rec = "-" if s["recovery_s"] is None else f"{s['recovery_s']:.2f}"
        lines.append(
            f"{s['name']:28} {s['requests']:>5} {s['failed_requests']:>5} "
            f"{s['failed_excused']:>7} {s['lost_samples']:>4} {s['duplicate_samples']:>4} "
            f"{s['samples_unacknowledged']:>7} {rec:>7} {b['p50']!s:>9}/{b['p99']!s:<10} "
            f"{d['p50']!s:>6}/{d['p99']!s:<7} {'yes' if s['passed'] else 'NO'}"
        )
    o = report["samples_overall"]
    lines.append(
        f"overall: {report['requests_overall']} requests, {report['failed_overall']} failed; "
        f"samples {o['samples_published']} stored, {o['samples_trained']} trained, "
        f"{o['lost_samples']} lost, {o['duplicate_samples']} duplicate, "
        f"{o['acked_missing_from_stream']} acknowledged but missing from the stream; "
        f"all passed: {report['passed']}; {report['wall_s']} s"
    )
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.rate <= 0:
        print("headroom bench faults: --rate must be > 0", file=sys.stderr)
        return 2
    out = Path(args.json) if args.json else None
    log_path = Path(args.log) if args.log else Path((args.json or "bench-faults") + ".log")
    try:
        report = asyncio.run(run_bench(args, log_path))
    except (ValueError, RuntimeError) as e:
        print(f"headroom bench faults: {e} (stack logs: {log_path})", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=1)
    if out:
        out.write_text(text + "\n")
    else:
        print(text)
    print(human(report), file=sys.stderr)
    return 0
