"""``python -m services.simulator``: several pods in one process, clean SIGTERM shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_healthy(http: aiohttp.ClientSession, url: str, proc) -> None:
    for _ in range(200):
        if proc.returncode is not None:
            raise AssertionError(f"simulator exited early with {proc.returncode}")
        try:
            async with http.get(url + "/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never became healthy")


async def test_main_runs_one_pod_per_port_and_stops_on_sigterm():
    ports = [free_port(), free_port()]
    env = {
        **os.environ,
        "HEADROOM_SIM_PORTS": ",".join(map(str, ports)),
        "HEADROOM_SIM_NAMES": "alpha,beta",
        "HEADROOM_SIM_MODEL": "sim/model",
        "HEADROOM_LOG_LEVEL": "INFO",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.simulator",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for port in ports:
                url = f"http://127.0.0.1:{port}"
                await wait_healthy(http, url, proc)
                async with http.post(url + "/v1/completions", json={"prompt": "hi"}) as r:
                    assert r.status == 200
                    assert (await r.json())["model"] == "sim/model"
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 15)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b"alpha" in err and b"beta" in err  # structured start-up log lines
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
