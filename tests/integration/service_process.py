"""Run a service as a real child process (``python -m services.X``) and stop it the way
an orchestrator does (SIGTERM, then a verdict on how it went)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def spawn(module: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``python -m module`` in the repo root with ``env`` over this process's environment."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, cwd=ROOT,
        env={**os.environ, **env}, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def terminate(proc: asyncio.subprocess.Process, name: str) -> tuple[int, bytes]:
    """SIGTERM and wait (15 s): (exit code, stderr); kills it and fails if it ignored it."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 15)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(f"{name} ignored SIGTERM; stderr:\n{err.decode()[-2000:]}") from None
    return proc.returncode, err
