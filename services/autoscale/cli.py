"""``headroom autoscale recommend``: the replica count an HPA would reach, per strategy.

Reads the pool's signals from the collector's ``/metrics`` (``--collector``, default
``http://127.0.0.1:9101``) or straight from the pods (``--pods name=url,... --engine E``),
takes ``--samples`` readings ``--interval-s`` apart, feeds them through HPA's arithmetic
(formula, tolerance, stabilisation windows, rate limits; :mod:`services.autoscale.hpa`) with
the targets given, and prints one line per strategy (or JSON with ``--json``). Operators use
it to pick targets before applying an HPA.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict

import aiohttp
import orjson

from services.autoscale.hpa import Behavior
from services.autoscale.signals import (
    STRATEGIES,
    PodLoad,
    PoolSignals,
    Recommendation,
    Recommender,
    pool_signals,
)
from services.collector.exposition import iter_samples

_POOL_GAUGES = {
    "headroom_pool_replicas",
    "headroom_pool_ready_replicas",
    "headroom_autoscale_recommended_replicas",
    *(s.gauge for s in STRATEGIES.values()),
}


class SourceError(Exception):
    """The collector or pods could not be read."""


# --------------------------------------------------------------------------------------
# Pure: signals from text
# --------------------------------------------------------------------------------------
def signals_from_collector(text: str, pool: str | None) -> tuple[str, PoolSignals, dict[str, int]]:
    """The pool's signals and the collector's own recommendations from its /metrics page.
    ``pool`` None picks the only pool exported (an error if there are several)."""
    by_pool: dict[str, dict[str, float]] = {}
    collector_recs: dict[str, dict[str, int]] = {}
    for s in iter_samples(text, _POOL_GAUGES):
        if s is None or "pool" not in s.labels:
            continue
        p = s.labels["pool"]
        if s.name == "headroom_autoscale_recommended_replicas":
            collector_recs.setdefault(p, {})[s.labels.get("strategy", "")] = int(s.value)
        else:
            by_pool.setdefault(p, {})[s.name] = s.value
    if not by_pool:
        raise SourceError("no headroom_pool_* gauges in the collector's metrics")
    if pool is None:
        if len(by_pool) > 1:
            raise SourceError(f"several pools ({', '.join(sorted(by_pool))}): pick one with --pool")
        pool = next(iter(by_pool))
    if pool not in by_pool:
        raise SourceError(f"pool {pool!r} not exported; pools: {', '.join(sorted(by_pool))}")
    g = by_pool[pool]
    sig = PoolSignals(
        replicas=int(g.get("headroom_pool_replicas", 0)),
        ready=int(g.get("headroom_pool_ready_replicas", 0)),
        **{s.signal: g.get(s.gauge) for s in STRATEGIES.values()},
    )
    return pool, sig, collector_recs.get(pool, {})


def render(
    pool: str,
    signals: PoolSignals,
    recs: Sequence[Recommendation],
    collector_recs: dict[str, int],
    current: int,
) -> str:
    lines = [
        f"pool {pool}: {signals.replicas} replicas ({signals.ready} ready); "
        f"HPA current replicas = {current}",
        f"{'strategy':<16}{'signal':>9}{'target':>8}{'ratio':>7}{'formula':>9}"
        f"{'HPA would reach':>17}  note",
    ]
    for r in recs:
        if r.decision is None or r.value is None:
            lines.append(f"{r.strategy:<16}{'n/a':>9}{r.target:>8g}{'':>7}{'':>9}{'keeps':>17}  "
                         "no ready pod reports this signal")  # fmt: skip
            continue
        d = r.decision
        note = []
        if d.desired == d.current and d.current > 0 and r.value != r.target:
            note.append("within tolerance")
        if d.limited_by:
            note.append(f"limited by {d.limited_by}")
        if d.next_step != d.recommended:
            note.append(f"next 15 s step: {d.next_step}")
        if r.strategy in collector_recs:
            note.append(f"collector (its targets, 5-min history): {collector_recs[r.strategy]}")
        lines.append(
            f"{r.strategy:<16}{r.value:>9.3f}{r.target:>8g}{r.value / r.target:>7.2f}"
            f"{d.desired:>9}{d.recommended:>17}  {'; '.join(note)}"
        )
    lines.append("signals: " + "; ".join(f"{n} = {s.description}" for n, s in STRATEGIES.items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Shell
# --------------------------------------------------------------------------------------
async def _get(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as r:
        if r.status != 200:
            raise SourceError(f"GET {url}: HTTP {r.status}")
        return await r.text()


async def _read_collector(http, url: str, pool: str | None):
    if "/metrics" not in url:
        url = url.rstrip("/") + "/metrics"
    try:
        text = await _get(http, url)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise SourceError(f"cannot read {url}: {type(e).__name__}: {e}") from e
    return signals_from_collector(text, pool)


async def _read_pods(http, spec: str, engine: str, max_batch_slots: int):
    from services.collector.discovery import parse_pod_list
    from services.collector.parsers import get_parser

    parse = get_parser(engine)
    targets = parse_pod_list(spec)
    if not targets:
        raise SourceError("--pods is empty")

    async def one(url: str) -> PodLoad:
        try:
            r = parse(await _get(http, url + "/metrics"))
        except (aiohttp.ClientError, TimeoutError, SourceError):
            return PodLoad(False)
        if r.found == 0:
            return PodLoad(False)
        slots = r.slots_used
        if slots is None and max_batch_slots > 0:
            slots = min(1.0, r.running / max_batch_slots)
        return PodLoad(True, r.prefill_backlog, slots, r.kv_usage)

    loads = await asyncio.gather(*(one(t.url) for t in targets))
    return "(pods read directly)", pool_signals(loads), {}


async def _run(args: argparse.Namespace) -> int:
    recommender = Recommender(
        {
            "prefill-backlog": args.target_prefill_backlog,
            "slots-used": args.target_slots_used,
            "kv-usage": args.target_kv_usage,
        },
        Behavior(
            min_replicas=args.min_replicas,
            max_replicas=args.max_replicas,
            tolerance=args.tolerance,
            scale_up_window_s=args.scale_up_window_s,
            scale_down_window_s=args.scale_down_window_s,
        ),
    )
    timeout = aiohttp.ClientTimeout(total=args.timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for i in range(args.samples):
            if i:
                await asyncio.sleep(args.interval_s)
            if args.pods:
                pool, sig, coll = await _read_pods(
                    http, args.pods, args.engine, args.max_batch_slots
                )
            else:
                pool, sig, coll = await _read_collector(http, args.collector, args.pool)
            current = args.current if args.current is not None else sig.replicas
            recs = recommender.update(time.monotonic(), sig, current)
    if args.json:
        out = {
            "pool": pool,
            "signals": asdict(sig),
            "current": current,
            "strategies": {
                r.strategy: {
                    "signal": r.value,
                    "target": r.target,
                    "desired": r.decision.desired if r.decision else None,
                    "recommended": r.decision.recommended if r.decision else None,
                    "next_step": r.decision.next_step if r.decision else None,
                    "limited_by": r.decision.limited_by if r.decision else None,
                    "collector_recommended": coll.get(r.strategy),
                }
                for r in recs
            },
        }
        print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(pool, sig, recs, coll, current))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom autoscale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("recommend", help="replicas HPA would reach per strategy")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--collector", default="http://127.0.0.1:9101",
                     help="collector admin URL (its /metrics is read)")  # fmt: skip
    src.add_argument("--pods", help='read pods directly: "name=url,name=url"')
    r.add_argument("--engine", default="vllm", help="engine of --pods (vllm, jetstream, ...)")
    r.add_argument("--pool", help="pool to read from the collector (default: the only one)")
    r.add_argument("--current", type=int, help="current replicas (default: pods in the pool)")
    for name, s in STRATEGIES.items():
        r.add_argument(f"--target-{name}", type=float, default=s.default_target,
                       help=f"target {s.description} (default {s.default_target:g})")  # fmt: skip
    b = Behavior()
    r.add_argument("--min-replicas", type=int, default=b.min_replicas)
    r.add_argument("--max-replicas", type=int, default=b.max_replicas)
    r.add_argument("--tolerance", type=float, default=b.tolerance)
    r.add_argument("--scale-up-window-s", type=float, default=b.scale_up_window_s)
    r.add_argument("--scale-down-window-s", type=float, default=b.scale_down_window_s)
    r.add_argument("--max-batch-slots", type=int, default=0,
                   help="batch slots per pod, to derive slots used from running (--pods)")  # fmt: skip
    r.add_argument("--samples", type=int, default=1, help="readings to take (stabilisation)")
    r.add_argument("--interval-s", type=float, default=1.0, help="seconds between readings")
    r.add_argument("--timeout-s", type=float, default=5.0, help="HTTP timeout per reading")
    r.add_argument("--json", action="store_true", help="print JSON")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.samples < 1:
        print("--samples must be >= 1", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args))
    except (SourceError, ValueError) as e:
        print(f"headroom autoscale: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
