"""The faults `headroom bench faults` injects, each with how it is lifted.

Every scenario runs on the same live stack (services/launcher.py, restarts on) while the
client keeps sending: ``inject`` applies the fault, ``restore`` lifts it (or waits for the
launcher to respawn what was killed) and returns when that happened on the bench's clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from services.launcher import Stack
from shared import embedded


@dataclass
class Ctx:
    stack: Stack
    nats: embedded.EmbeddedServer
    redis: embedded.EmbeddedServer
    http: aiohttp.ClientSession
    now: Callable[[], float]  # the bench's clock (seconds)
    hold_s: float = 5.0  # how long a held fault lasts
    notes: dict = field(default_factory=dict)  # what the scenario observed on the way


@dataclass(frozen=True)
class Scenario:
    name: str
    inject: Callable[[Ctx], Awaitable[None]]
    restore: Callable[[Ctx], Awaitable[float]]  # returns the restore time (bench clock)
    allowed_failures: str | None = None  # see bench/faults/report.py summarize()
    doc: str = ""


# --- kill -9, restarted by the launcher ---------------------------------------------------
def _kill(*names: str) -> tuple[Callable, Callable]:
    async def inject(ctx: Ctx) -> None:
        ctx.notes["killed_pids"] = {n: ctx.stack.kill(n, signal.SIGKILL) for n in names}
        ctx.notes["_killed_at"] = ctx.now()

    async def restore(ctx: Ctx) -> float:
        old = ctx.notes["killed_pids"]
        deadline = time.monotonic() + 60
        while any(ctx.stack.child(n).proc.pid == old[n] for n in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{names} not respawned within 60 s")
            await asyncio.sleep(0.02)
        respawned = ctx.now()
        while not all(ctx.stack.child(n).healthy for n in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{names} not healthy within 60 s")
            await asyncio.sleep(0.05)
        killed_at = ctx.notes.pop("_killed_at")
        ctx.notes["respawned_after_s"] = round(respawned - killed_at, 3)
        ctx.notes["down_s"] = round(ctx.now() - killed_at, 3)  # until healthy again
        return respawned

    return inject, restore


def _signal_held(names: tuple[str, ...], sig: int, undo: int) -> tuple[Callable, Callable]:
    async def inject(ctx: Ctx) -> None:
        for n in names:
            os.kill(ctx.stack.child(n).proc.pid, sig)

    async def restore(ctx: Ctx) -> float:
        await asyncio.sleep(ctx.hold_s)
        for n in names:
            os.kill(ctx.stack.child(n).proc.pid, undo)
        return ctx.now()

    return inject, restore


def _server_restart(kind: str) -> tuple[Callable, Callable]:
    """Crash the bench's own NATS or Redis (kill -9), restart it after 1 s on the same port
    (NATS with its JetStream store; Redis, which persists nothing, empty)."""

    async def inject(ctx: Ctx) -> None:
        srv = ctx.nats if kind == "nats" else ctx.redis
        await asyncio.to_thread(srv.crash)

    async def restore(ctx: Ctx) -> float:
        await asyncio.sleep(1.0)
        srv = ctx.nats if kind == "nats" else ctx.redis
        await asyncio.to_thread(srv.restart)
        return ctx.now()

    return inject, restore


def _pod_fault(body: dict, pod: str = "pod-0") -> tuple[Callable, Callable]:
    async def post(ctx: Ctx, b: dict) -> None:
        url = ctx.stack.pod_urls[pod] + "/sim/fault"
        async with ctx.http.post(url, json=b) as r:
            if r.status != 200:
                raise RuntimeError(f"fault {b} on {pod}: HTTP {r.status} {await r.text()}")

    async def inject(ctx: Ctx) -> None:
        await post(ctx, {"count": 1_000_000, **body})

    async def restore(ctx: Ctx) -> float:
        await asyncio.sleep(ctx.hold_s)
        await post(ctx, {"mode": "off"})
        return ctx.now()

    return inject, restore


def _make(name: str, pair: tuple[Callable, Callable], allowed: str | None = None,
          doc: str = "") -> Scenario:  # fmt: skip
    return Scenario(name, pair[0], pair[1], allowed, doc)


def all_scenarios() -> list[Scenario]:
    stop, cont = signal.SIGSTOP, signal.SIGCONT
    return [
        _make("predictor-kill-one", _kill("predictor-0"), doc="kill -9 one of two predictors"),
        _make("predictor-kill-all", _kill("predictor-0", "predictor-1"),
              doc="kill -9 both predictors"),
        _make("predictors-frozen", _signal_held(("predictor-0", "predictor-1"), stop, cont),
              doc="SIGSTOP both predictors for the hold time, then SIGCONT"),
        _make("trainer-kill", _kill("trainer"), doc="kill -9 the trainer"),
        _make("collector-kill", _kill("collector"), doc="kill -9 the collector"),
        _make("redis-restart-empty", _server_restart("redis"),
              doc="kill -9 Redis, restart it 1 s later with nothing in it"),
        _make("nats-restart", _server_restart("nats"),
              doc="kill -9 NATS, restart it 1 s later on its JetStream store"),
        _make("gateway-replica-kill", _kill("gateway-1"), "in_flight_on_gateway:1",
              doc="kill -9 the second of two gateway replicas (its in-flight streams die "
              "with it; new requests fail over to the other replica)"),
        _make("pod-crash-mid-stream", _pod_fault({"mode": "drop", "after_tokens": 3}),
              "mid_stream_on:pod-0", doc="pod-0 cuts every stream after 3 tokens"),
        _make("pod-hang-before-first-byte", _pod_fault({"mode": "hang", "delay_s": 30.0}),
              doc="pod-0 accepts requests and never answers"),
        _make("pod-http-500", _pod_fault({"mode": "error", "status": 500}),
              doc="pod-0 answers 500 before any token"),
        _make("pod-malformed-sse", _pod_fault({"mode": "malformed", "after_tokens": 0}),
              doc="pod-0's first SSE event is not JSON"),
        _make("pod-slow-metrics", _pod_fault({"mode": "slow_metrics", "delay_s": 3.0}),
              doc="pod-0's /metrics takes 3 s (the collector's scrape timeout is 1 s)"),
    ]  # fmt: skip
