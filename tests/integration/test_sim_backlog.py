"""The simulator's listen backlog: a pod process whose event loop does not run (SIGSTOP: the
extreme of a CPU-starved process) still completes as many connections as its backlog, like
vLLM on uvicorn (2048); past it the kernel drops SYNs and clients' connects time out, which
is how a gateway flooding a busy simulator saw "connect timed out" from live pods."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from services.simulator.settings import LISTEN_BACKLOG, SimulatorSettings
from tests.integration.test_sim_main import free_port, wait_healthy

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
FLOOD = 400  # connections opened at once to the frozen pod


async def _connected_while_frozen(backlog: int | None) -> int:
    port = free_port()
    env = {**os.environ, "HEADROOM_SIM_PORTS": str(port), "HEADROOM_LOG_LEVEL": "WARNING"}
    if backlog is not None:
        env["HEADROOM_SIM_BACKLOG"] = str(backlog)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.simulator", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    writers = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            await wait_healthy(http, f"http://127.0.0.1:{port}", proc)
        proc.send_signal(signal.SIGSTOP)

        async def connect() -> bool:
            try:
                async with asyncio.timeout(2.5):  # a SYN dropped once is resent after 1 s
                    _, wr = await asyncio.open_connection("127.0.0.1", port)
            except (TimeoutError, OSError):
                return False
            writers.append(wr)
            return True

        results = await asyncio.gather(*(connect() for _ in range(FLOOD)))
        return sum(results)
    finally:
        for wr in writers:
            wr.close()
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def test_default_backlog_is_uvicorns():
    assert SimulatorSettings().backlog == LISTEN_BACKLOG == 2048


async def test_a_frozen_pod_completes_connections_up_to_its_backlog():
    assert await _connected_while_frozen(None) == FLOOD  # 2048: the whole flood
    small = await _connected_while_frozen(32)  # the accept queue holds backlog + 1
    assert 32 <= small <= 40, small
