"""The faults bench's client: streaming completions at a steady (Poisson) rate, spread over the
gateway replicas, each recorded as a :class:`~bench.faults.report.Rec`.

A request whose connection fails before any response (a replica that is down) is sent once
more to the other replica, as a load balancer in front of the replicas would; a stream that
breaks after its response started is a failed request. Loopback only; bounded by the
caller's stop event, a per-request timeout and a cap on requests in flight.
"""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import orjson

from bench.faults.report import Rec
from bench.replay import check_loopback
from bench.traces import Trace


class Traffic:
    def __init__(
        self,
        gateway_urls: list[str],
        trace: Trace,
        model: str,
        *,
        rate_rps: float,
        seed: int = 0,
        request_timeout_s: float = 60.0,
        max_in_flight: int = 256,
        clock=time.perf_counter,
    ) -> None:
        self.urls = [check_loopback(u) for u in gateway_urls]
        self.trace = trace
        self.model = model
        self.rate = rate_rps
        self.rng = random.Random(seed)
        self.timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self.sem = asyncio.Semaphore(max_in_flight)
        self.clock = clock
        self.t0 = clock()
        self.scenario = "warmup"
        self.phase = "before"
        self.records: list[Rec] = []
        self._next = 0
        self._rr = 0
        self._tasks: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None

    def now(self) -> float:
        return self.clock() - self.t0

    async def __aenter__(self) -> Traffic:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=self.timeout
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self.drain()
        if self._session is not None:
            await self._session.close()

    def _body(self) -> bytes:
        req = self.trace.requests[self._next % len(self.trace.requests)]
        self._next += 1
        return orjson.dumps({
            "model": self.model, "prompt": req.prompt_text(), "stream": True,
            "max_tokens": max(4, min(req.output_tokens, 64)),
            "stream_options": {"include_usage": True},
        })  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set (open loop: arrivals do not wait for answers)."""
        while not stop.is_set():
            await self.sem.acquire()
            rec = Rec(self.scenario, self.phase, self.now())
            self.records.append(rec)
            task = asyncio.create_task(self._one(rec, self._body()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            gap = self.rng.expovariate(self.rate)
            try:
                await asyncio.wait_for(stop.wait(), gap)
            except TimeoutError:
                pass

    async def drain(self, timeout_s: float = 90.0) -> None:
        """Wait for the requests in flight (bounded; the rest are cancelled and fail)."""
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, rec: Rec, body: bytes) -> None:
        try:
            first = self._rr % len(self.urls)
            self._rr += 1
            order = [first] + [i for i in range(len(self.urls)) if i != first]
            for attempt, gw in enumerate(order[:2]):
                rec.gateway = gw
                try:
                    await self._send(rec, self.urls[gw], body)
                    return
                except _NotSent:
                    if attempt + 1 >= min(2, len(order)):
                        rec.error = "gateway_unreachable"
                        return
                    rec.client_retries += 1
        except asyncio.CancelledError:
            rec.error = rec.error or "cancelled"
            raise
        finally:
            self.sem.release()

    async def _send(self, rec: Rec, url: str, body: bytes) -> None:
        assert self._session is not None
        sent = self.clock()
        try:
            resp = await self._session.post(
                url + "/v1/completions", data=body, headers={"content-type": "application/json"}
            )
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as e:
            raise _NotSent from e
        except (aiohttp.ClientError, TimeoutError) as e:
            rec.error = f"request_{type(e).__name__}"
            return
        async with resp:
            h = resp.headers
            rec.status = resp.status
            rec.path = h.get("x-headroom-routing")
            rec.reason = h.get("x-headroom-fallback-reason")
            rec.pod = h.get("x-headroom-pod")
            rec.request_id = h.get("x-request-id")
            if resp.status != 200:
                rec.error = f"status_{resp.status}"
                await resp.read()
                return
            try:
                await self._read(resp, rec, sent)
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                rec.error = f"stream_{type(e).__name__}"
                rec.mid_stream = rec.ttft_s is not None

    async def _read(self, resp: aiohttp.ClientResponse, rec: Rec, sent: float) -> None:
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                rec.ok = rec.ttft_s is not None
                if not rec.ok:
                    rec.error = "no_token"
                return
            ev = orjson.loads(payload)
            if "error" in ev:
                rec.error = "error_event"
                rec.mid_stream = rec.ttft_s is not None
                return
            if rec.ttft_s is None and any(c.get("text") for c in ev.get("choices") or ()):
                rec.ttft_s = self.clock() - sent
        rec.error = "stream_ended_early"
        rec.mid_stream = rec.ttft_s is not None


class _NotSent(Exception):
    """The connection failed before the request was sent (retryable on another replica)."""
