"""``python -m services.gateway`` as a real process (shared/runner.py on uvloop): serves,
stops cleanly on SIGTERM, also while NATS is unreachable at start-up."""

from __future__ import annotations

import asyncio

import aiohttp

from shared.embedded import free_port
from tests.integration.service_process import spawn, terminate


async def _spawn(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await spawn("services.gateway", env)


async def _terminate(proc: asyncio.subprocess.Process) -> tuple[int, bytes]:
    return await terminate(proc, "gateway")


async def test_process_serves_and_stops_on_sigterm(isolated):
    port = free_port()
    proc = await _spawn({
        "HEADROOM_NATS_URL": isolated["nats_url"],
        "HEADROOM_NAMESPACE": isolated["namespace"],
        "HEADROOM_GATEWAY_PORT": str(port),
    })  # fmt: skip
    try:
        body = None
        async with aiohttp.ClientSession() as http:
            for _ in range(300):  # bounded: 15 s
                try:
                    async with http.get(f"http://127.0.0.1:{port}/health") as r:
                        body = await r.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        assert body is not None and body["status"] == "ok", body
    finally:
        rc, err = await _terminate(proc)
    assert rc == 0, err.decode()[-2000:]
    assert b"gateway started" in err and b"gateway stopping" in err, err.decode()[-2000:]


async def test_sigterm_while_waiting_for_nats():
    proc = await _spawn({
        "HEADROOM_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "HEADROOM_GATEWAY_PORT": str(free_port()),
    })  # fmt: skip
    seen = b""
    try:
        async with asyncio.timeout(15):
            while b"Connection refused" not in seen:  # the first failed NATS connect
                line = await proc.stderr.readline()
                assert line, f"gateway exited early: {seen.decode()[-2000:]}"
                seen += line
    finally:
        rc, err = await _terminate(proc)
    assert rc == 0, (seen + err).decode()[-2000:]
