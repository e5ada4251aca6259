"""`headroom replay`: send a trace to a running gateway and report like the lab does.

Each trace request becomes one ``POST /v1/completions`` at its (rate-scaled) arrival time,
with the synthesised prompt text, ``max_tokens`` = the trace's output length and the SLO
headers when given. The report has the lab's JSON shape (bench/lab/report.py):

- streaming (``--streaming``): TTFT at the first chunk carrying text, output tokens from the
  usage chunk (else the token chunks), TPOT = (e2e - ttft) / (tokens - 1);
- not streaming: the client sees the first token with the whole answer, so TTFT = E2E and
  there is no TPOT;
- a 503 from an admitter (shed) counts as ``rejected``; any other error or a broken stream
  as ``failed``; ``x-headroom-routing`` / ``x-headroom-model-version`` headers fill the
  routing counts and ``prediction.model_versions`` (prediction errors are not visible to a
  client: their MAPE fields stay null; the gateway and trainer expose them as metrics).

Safety: only loopback gateways (127.0.0.1, ::1, localhost); the run is bounded by the trace
slice, ``--max-duration-s`` and a per-request timeout; ``--concurrency-cap`` bounds requests
in flight (a request waiting for a slot is sent late and timed from when it is sent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import orjson

from bench.lab.report import FAILED, OK, REJECTED, RequestRecord, summarize
from bench.traces import Trace, TraceRequest, read_trace

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def check_loopback(url: str) -> str:
    u = urlparse(url)
    if u.scheme not in ("http", "https") or u.hostname not in LOOPBACK:
        raise ValueError(
            f"replay only targets a loopback gateway (http://127.0.0.1:PORT), not {url!r}"
        )
    return url.rstrip("/")


def slo_headers(slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> dict[str, str]:
    h = {}
    if slo_ttft_ms is not None:
        h["x-llm-d-slo-ttft-ms"] = f"{slo_ttft_ms:g}"
    if slo_tpot_ms is not None:
        h["x-llm-d-slo-tpot-ms"] = f"{slo_tpot_ms:g}"
    return h


class Replayer:
    def __init__(
        self,
        url: str,
        trace: Trace,
        *,
        model: str | None = None,
        streaming: bool = True,
        slo_ttft_ms: float | None = None,
        slo_tpot_ms: float | None = None,
        priority: int | None = None,
        profile: str | None = None,
        concurrency_cap: int = 256,
        request_timeout_s: float = 300.0,
        max_duration_s: float = 3600.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.url = check_loopback(url)
        self.trace = trace
        self.model = model
        self.streaming = streaming
        self.slo_ttft_ms, self.slo_tpot_ms = slo_ttft_ms, slo_tpot_ms
        self.headers = {"content-type": "application/json", **slo_headers(slo_ttft_ms, slo_tpot_ms)}
        if priority is not None:
            self.headers["x-headroom-priority"] = str(priority)
        if profile:
            self.headers["x-headroom-profile"] = profile
        if concurrency_cap < 1:
            raise ValueError("concurrency_cap must be >= 1")
        self.cap = concurrency_cap
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self.max_duration_s = max_duration_s
        self.clock = clock
        self.records = [
            RequestRecord(r.index, r.arrival_s, r.input_tokens, r.output_tokens) for r in trace
        ]
        self.versions: set[str] = set()
        self.done = 0

    async def resolve_model(self, session: aiohttp.ClientSession) -> str:
        if self.model:
            return self.model
        async with session.get(self.url + "/v1/models") as resp:
            body = await resp.json()
        data = body.get("data") or []
        if resp.status != 200 or not data:
            raise RuntimeError(f"{self.url}/v1/models: no model served (HTTP {resp.status})")
        self.model = str(data[0]["id"])
        return self.model

    async def run(self, progress: Callable[[int], None] | None = None) -> list[RequestRecord]:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=self.timeout) as session:
            model = await self.resolve_model(session)
            sem = asyncio.Semaphore(self.cap)
            start = self.clock()
            deadline = start + self.max_duration_s
            tasks = []
            for req, rec in zip(self.trace.requests, self.records, strict=True):
                data = self.body(model, req)  # built before its send time
                delay = start + req.arrival_s - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.clock() > deadline:
                    break
                await sem.acquire()
                tasks.append(
                    asyncio.create_task(self._one(session, data, rec, start, sem, progress))
                )
            left = max(0.0, deadline - self.clock())
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=left)
                for t in pending:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return self.records

    def body(self, model: str, req: TraceRequest) -> bytes:
        body = {"model": model, "prompt": req.prompt_text(), "max_tokens": req.output_tokens,
                "stream": self.streaming}  # fmt: skip
        if self.streaming:
            body["stream_options"] = {"include_usage": True}
        return orjson.dumps(body)

    async def _one(
        self,
        session: aiohttp.ClientSession,
        data: bytes,
        rec: RequestRecord,
        start: float,
        sem: asyncio.Semaphore,
        progress: Callable[[int], None] | None,
    ) -> None:
        try:
            rec.arrival_s = self.clock() - start  # timed from the moment it is sent
            async with session.post(
                self.url + "/v1/completions", data=data, headers=self.headers
            ) as resp:
                rec.pod = resp.headers.get("x-headroom-pod")
                rec.path = resp.headers.get("x-headroom-routing")
                version = resp.headers.get("x-headroom-model-version")
                if version:
                    rec.model_version = version
                    self.versions.add(version)
                if resp.status != 200:
                    text = await resp.text()
                    rec.status = REJECTED if resp.status == 503 and "shed" in text else FAILED
                    rec.error = f"HTTP {resp.status}: {text[:200]}"
                    return
                if self.streaming:
                    await self._read_stream(resp, rec, start)
                else:
                    reply = await resp.json()
                    rec.finished_s = rec.first_token_s = self.clock() - start
                    rec.output_tokens = int((reply.get("usage") or {}).get("completion_tokens", 0))
                    rec.status = OK
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            rec.status, rec.error = FAILED, f"{type(e).__name__}: {e}"
        finally:
            sem.release()
            self.done += 1
            if progress is not None:
                progress(self.done)

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, rec: RequestRecord, start: float
    ) -> None:
        chunks = usage = 0
        finished = False
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                finished = True
                break
            ev = orjson.loads(payload)
            if "error" in ev:
                rec.status, rec.error = FAILED, str(ev["error"])[:200]
                return
            for ch in ev.get("choices") or ():
                if ch.get("text"):
                    chunks += 1
                    now = self.clock() - start
                    if rec.first_token_s is None:
                        rec.first_token_s = now
                    rec.finished_s = now
            u = ev.get("usage")
            if u:
                usage = int(u.get("completion_tokens") or 0)
        if not finished or rec.first_token_s is None:
            rec.status, rec.error = FAILED, "stream ended early"
            return
        rec.output_tokens = usage or chunks
        rec.status = OK


def report(replayer: Replayer, trace: Trace, args_view: dict, wall_s: float) -> dict:
    records = replayer.records
    summary = summarize(records, slo_ttft_ms=replayer.slo_ttft_ms, slo_tpot_ms=replayer.slo_tpot_ms)
    return {
        "policy": args_view.get("policy") or "gateway",
        "trace": Path(trace.path).name,
        "trace_format": trace.format,
        "pods": args_view.get("pods"),
        "profile": args_view.get("profile"),
        "rate_scale": args_view["rate_scale"],
        "seed": args_view["seed"],
        "limit": args_view.get("limit"),
        "offset": args_view.get("offset", 0),
        "streaming": replayer.streaming,
        **summary,
        "offered_rps": round((len(trace) - 1) / trace.duration_s, 4)
        if trace.duration_s > 0
        else None,
        "skipped_lines": trace.skipped_count,
        "prefix_cache_hit_rate": None,
        "preemptions": None,
        "prediction": {
            "ttft_mape": None,
            "tpot_mape": None,
            "samples": None,
            "model_versions": len(replayer.versions),
            "fallback_decisions": summary["routing"].get("fallback", 0),
        },
        "url": replayer.url,
        "wall_seconds": round(wall_s, 3),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headroom replay",
        description="Send a trace to a running (loopback) gateway; prints the lab's JSON report.",
    )
    p.add_argument("--url", default="http://127.0.0.1:8080", help="gateway base URL")
    p.add_argument("--trace", required=True, help="Mooncake .jsonl or Azure .csv trace")
    p.add_argument("--format", choices=("mooncake", "azure"))
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--limit", type=int, default=1000, help="at most this many requests")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="prompt synthesis seed")
    p.add_argument("--slo-ttft-ms", type=float)
    p.add_argument("--slo-tpot-ms", type=float)
    p.add_argument("--priority", type=int, help="x-headroom-priority")
    p.add_argument("--policy", help="x-headroom-profile (default: the gateway's profile)")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--streaming", action="store_true", help="ask for streams (TTFT/TPOT)")
    p.add_argument("--concurrency-cap", type=int, default=256, help="max requests in flight")
    p.add_argument("--request-timeout-s", type=float, default=300.0)
    p.add_argument("--max-duration-s", type=float, default=3600.0, help="hard stop")
    p.add_argument("--pods", type=int, help="recorded in the report only")
    p.add_argument("--profile", help="recorded in the report only")
    p.add_argument("--json", metavar="OUT", help="write the report here (default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


async def replay(replayer: Replayer, progress: Callable[[int], None] | None = None) -> float:
    t0 = time.perf_counter()
    await replayer.run(progress)
    return time.perf_counter() - t0


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not args.rate_scale > 0 or args.limit < 1:
            raise ValueError("--rate-scale must be > 0 and --limit >= 1")
        trace = read_trace(
            args.trace, format=args.format, rate_scale=args.rate_scale, limit=args.limit,
            offset=args.offset, seed=args.seed,
        )  # fmt: skip
        replayer = Replayer(
            args.url, trace, model=args.model, streaming=args.streaming,
            slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms, priority=args.priority,
            profile=args.policy, concurrency_cap=args.concurrency_cap,
            request_timeout_s=args.request_timeout_s, max_duration_s=args.max_duration_s,
        )  # fmt: skip
    except (ValueError, OSError) as e:
        print(f"headroom replay: {e}", file=sys.stderr)
        return 2
    if args.quiet:
        wall = asyncio.run(replay(replayer))
    else:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(
            "replay", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(stderr=True),
        ) as prog:  # fmt: skip
            task = prog.add_task("replay", total=len(trace))
            wall = asyncio.run(replay(replayer, lambda n: prog.update(task, completed=n)))
    out = report(replayer, trace, vars(args), wall)
    text = json.dumps(out, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    return 0
