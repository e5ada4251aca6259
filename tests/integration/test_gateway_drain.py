"""SIGTERM drains a real gateway process (``python -m services.gateway``, real NATS, a real
simulator pod): readiness turns false and new requests get 503 ``draining`` first, then the
listener closes (connection refused) while a running stream goes on to its end; what still
runs at the drain deadline is cut, with an SSE error event saying so; the process exits 0."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import orjson
import pytest

from services.simulator.server import start_pod
from shared.bus import connect_nats
from shared.embedded import free_port
from shared.schemas import PodRecord, PodSnapshot
from tests.integration.service_process import spawn, terminate

pytestmark = pytest.mark.timeout(120)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "p1"
CMPL = "/v1/completions"


class Process:
    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.url = proc, f"http://127.0.0.1:{port}"
        self.stderr = bytearray()
        self._reader = asyncio.create_task(self._read_stderr())

    async def _read_stderr(self) -> None:
        while line := await self.proc.stderr.readline():
            self.stderr += line

    async def exited(self, timeout_s: float) -> int:
        rc = await asyncio.wait_for(self.proc.wait(), timeout_s)
        await self._reader
        return rc


async def _start(isolated, **settings: str) -> tuple[Process, object, object]:
    pod = await start_pod("pod-0", model=MODEL)
    port = free_port()
    env = {
        "HEADROOM_NATS_URL": isolated["nats_url"], "HEADROOM_NAMESPACE": isolated["namespace"],
        "HEADROOM_POOL": POOL, "HEADROOM_GATEWAY_PORT": str(port),
        "HEADROOM_GATEWAY_PROFILE": "round-robin", "HEADROOM_GATEWAY_STALE_AFTER_S": "600",
        **{f"HEADROOM_GATEWAY_{k.upper()}": v for k, v in settings.items()},
    }  # fmt: skip
    gw = Process(await spawn("services.gateway", env), port)
    nc = await connect_nats(isolated["nats_url"], "drain-test")
    names = isolated["names"]
    async with aiohttp.ClientSession() as http:
        for _ in range(400):  # bounded: 20 s for the process to start and see the pod
            rec = PodRecord(name="pod-0", url=pod.url, ready=True, scraped_at=time.time(),
                            models=[MODEL])  # fmt: skip
            snap = PodSnapshot(pool=POOL, ts=time.time(), pods=[rec])
            await nc.publish(names.pod_snapshots(POOL), snap.encode())
            try:
                async with http.get(gw.url + "/v1/models") as r:
                    if r.status == 200 and (await r.json())["data"]:
                        break
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"gateway did not come up: {gw.stderr.decode()[-2000:]}")
        async with http.get(gw.url + "/readyz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
    return gw, pod, nc


async def _probe(url: str, method: str = "GET", path: str = "/readyz"):
    """A request on a new connection: (status, body) or the connection error."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 2} if method == "POST" else None
        try:
            async with s.request(method, url + path, json=body) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, await r.json()
        except aiohttp.ClientConnectorError as e:
            return e


async def _stream(http: aiohttp.ClientSession, url: str, max_tokens: int, started: asyncio.Event):
    """Stream a completion: (token events, saw [DONE], when it ended, the error event)."""
    body = {"model": MODEL, "prompt": "tell a long story", "max_tokens": max_tokens,
            "stream": True}  # fmt: skip
    tokens, done, error = 0, False, None
    async with http.post(url + CMPL, json=body) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: [DONE]"):
                done = True
            elif line.startswith(b"data: "):
                event = orjson.loads(line[6:])
                if "error" in event:
                    error = event["error"]
                else:
                    tokens += bool(event["choices"])
                    started.set()
    return tokens, done, time.monotonic(), error


async def test_sigterm_lets_the_running_stream_finish_and_refuses_new_requests(isolated):
    gw, pod, nc = await _start(isolated, drain_unready_s="3", drain_timeout_s="60")
    try:
        async with aiohttp.ClientSession() as http:
            started = asyncio.Event()
            stream = asyncio.create_task(_stream(http, gw.url, 1000, started))
            await asyncio.wait_for(started.wait(), 10)
            gw.proc.send_signal(signal.SIGTERM)
            sigterm_at = time.monotonic()
            # 1. readiness false at once; new requests get a clear 503 (OpenAI error body)
            for _ in range(100):
                status, _, body = await _probe(gw.url)
                if status == 503:
                    break
                await asyncio.sleep(0.01)
            assert (status, body["status"]) == (503, "draining")
            status, headers, err = await _probe(gw.url, "POST", CMPL)
            assert status == 503 and err["error"]["code"] == "draining"
            assert err["error"]["type"] == "service_unavailable"
            assert headers["connection"] == "close" and "retry-after" in headers
            async with aiohttp.ClientSession() as other:
                async with other.get(gw.url + "/livez") as r:
                    assert r.status == 200  # alive while draining
            # 2. then the listener closes: connection refused
            for _ in range(200):  # bounded: 10 s
                refused = await _probe(gw.url)
                if isinstance(refused, aiohttp.ClientConnectorError):
                    break
                await asyncio.sleep(0.05)
            assert isinstance(refused, aiohttp.ClientConnectorError), refused
            refused_at = time.monotonic()
            assert refused_at - sigterm_at >= 2.5  # the unready window came first
            assert not stream.done()  # the stream still runs with the listener closed
            # 3. the running stream finishes
            tokens, done, ended_at, error = await asyncio.wait_for(stream, 60)
            assert done and tokens == 1000 and ended_at > refused_at and error is None
        rc = await gw.exited(30)
        assert rc == 0, gw.stderr.decode()[-3000:]
        assert b"gateway draining" in gw.stderr
        assert pod.engine.stats().request_success == 1
    finally:
        if gw.proc.returncode is None:
            await terminate(gw.proc, "gateway")
        await nc.close()
        await pod.stop()


async def test_the_drain_deadline_cuts_what_still_runs(isolated):
    gw, pod, nc = await _start(isolated, drain_unready_s="0.2", drain_timeout_s="1")
    try:
        async with aiohttp.ClientSession() as http:
            started = asyncio.Event()
            stream = asyncio.create_task(_stream(http, gw.url, 5000, started))
            body = {"model": MODEL, "prompt": "another long story", "max_tokens": 5000}
            plain = asyncio.create_task(http.post(gw.url + CMPL, json=body))
            await asyncio.wait_for(started.wait(), 10)
            for _ in range(200):  # both run on the pod
                if pod.engine.stats().running == 2:
                    break
                await asyncio.sleep(0.02)
            gw.proc.send_signal(signal.SIGTERM)
            sigterm_at = time.monotonic()
            async with await asyncio.wait_for(plain, 30) as r:  # cut before its response
                assert r.status == 503
                assert (await r.json())["error"]["code"] == "shutdown"
            tokens, done, ended_at, error = await asyncio.wait_for(stream, 30)
            assert not done and 0 < tokens < 5000
            assert 1.0 <= ended_at - sigterm_at < 10.0
            # told why, in the stream (the OpenAI SDK raises it as an APIError)
            assert error["code"] == "shutdown" and error["type"] == "service_unavailable"
        assert await gw.exited(30) == 0, gw.stderr.decode()[-3000:]
        for _ in range(100):  # the pod aborts the request whose connection was closed
            if not pod.engine.has_work():
                break
            await asyncio.sleep(0.02)
        assert pod.engine.stats().request_aborted == 2
        assert b"cut before its end (shutdown)" in gw.stderr
    finally:
        if gw.proc.returncode is None:
            await terminate(gw.proc, "gateway")
        await nc.close()
        await pod.stop()
