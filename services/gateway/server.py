"""Run the gateway app under uvicorn inside the current event loop.

Used by ``main`` and by tests/benchmarks that need a real gateway on a free port.

Stopping with :meth:`RunningGateway.drain` (what SIGTERM does to ``headroom gateway``):

1. readiness (``/readyz``) turns false and new proxy requests get 503 ``draining`` (an
   OpenAI error body, ``Retry-After``, ``connection: close``), for ``drain_unready_s``;
2. the listener closes (new connections are refused) and idle keep-alive connections are
   closed; running requests (streams, non-streaming generations, requests in the
   flow-control queue) go on for up to ``drain_timeout_s``, each connection closing after
   its response;
3. whatever still runs then is cut (uvicorn cancels it): a stream ends with an SSE error
   event, a non-streaming request gets 503, both with code ``shutdown`` (counted as
   ``shutdown`` in ``headroom_gateway_requests_failed_total``); the lifespan stops: the
   training samples are handed to JetStream, the pod connections and NATS closed.

uvicorn's own signal handlers are not installed (:class:`_Server`): the process's runner
(shared/runner.py) owns SIGTERM/SIGINT and calls the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn

from services.gateway.app import GatewayApp, create_app
from services.gateway.gateway import Gateway
from services.gateway.settings import GatewaySettings
from shared.runner import StartAborted
from shared.telemetry import Telemetry


class GatewayStartupInterrupted(StartAborted):
    """SIGTERM/SIGINT arrived before the gateway finished starting."""


@dataclass
class RunningGateway:
    app: GatewayApp
    server: uvicorn.Server
    task: asyncio.Task
    url: str

    @property
    def gateway(self) -> Gateway:
        return self.app.gateway

    async def drain(self) -> None:
        """Stop gracefully (module docstring): readiness false and new requests refused for
        ``drain_unready_s``, then the listener closed while running requests finish (up to
        ``drain_timeout_s``), then the lifespan's shutdown."""
        s = self.gateway.settings
        self.gateway.begin_drain()
        if s.drain_unready_s > 0 and not self.task.done():
            await asyncio.wait({self.task}, timeout=s.drain_unready_s)
        await self.stop(timeout_s=s.drain_timeout_s + 10.0)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop now: the listener closes, running requests get up to ``drain_timeout_s``
        (uvicorn's graceful shutdown), then the lifespan's shutdown; all within
        ``timeout_s`` or the server is forced out."""
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        except TimeoutError:
            self.server.force_exit = True
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class _Server(uvicorn.Server):
    """uvicorn's server without its own SIGTERM/SIGINT handlers (``capture_signals``, which
    uvicorn's ``serve`` enters: a no-op here; tests/unit/test_gateway_server.py fails if
    uvicorn stops calling it): the runner owns the signals and drains the gateway."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


async def start_gateway(
    settings: GatewaySettings,
    *,
    port: int | None = None,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.time,
    startup_timeout_s: float | None = 15.0,
    telemetry: Telemetry | None = None,
) -> RunningGateway:
    """Start the gateway on ``settings.host`` and ``port`` (default ``settings.port``; 0 = a
    free port) and wait until its lifespan has started (NATS connected, stream ensured).

    Raises RuntimeError if startup fails, takes longer than ``startup_timeout_s`` (None: wait
    for NATS as long as it takes) or is interrupted by SIGTERM/SIGINT."""
    app = create_app(settings, rng=rng, clock=clock, telemetry=telemetry)
    sock = _bind(settings.host, settings.port if port is None else port)
    # httptools: uvicorn's C-parser protocol (pinned in the gateway extra); h11, the
    # pure-Python one, costs ~1 ms more CPU per streamed request. No X-Forwarded-* rewriting
    # middleware: the gateway never uses the client address.
    config = uvicorn.Config(
        app, http="httptools", log_config=None, access_log=False, lifespan="on",
        proxy_headers=False, timeout_graceful_shutdown=settings.drain_timeout_s,  # type: ignore[arg-type]
    )  # fmt: skip
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    deadline = None if startup_timeout_s is None else time.monotonic() + startup_timeout_s
    while not server.started:
        timed_out = deadline is not None and time.monotonic() > deadline
        interrupted = server.should_exit
        if task.done() or interrupted or timed_out:
            server.should_exit = True
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            sock.close()
            if interrupted:
                raise GatewayStartupInterrupted("gateway startup interrupted by a signal")
            if app.gateway.start_error is not None:  # e.g. the bus refused the credentials
                raise app.gateway.start_error
            why = "timed out" if timed_out else "failed"
            raise RuntimeError(f"gateway startup {why} (see the log for the cause)")
        await asyncio.sleep(0.02)
    host, bound_port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    return RunningGateway(app, server, task, f"http://{url_host}:{bound_port}")
