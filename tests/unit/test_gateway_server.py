"""The gateway's uvicorn server installs no signal handlers of its own: the process's runner
(shared/runner.py) owns SIGTERM and drains the gateway (services/gateway/server.py).

The fence: uvicorn's ``Server.serve`` enters ``Server.capture_signals`` (which installs
uvicorn's handlers in the main thread); ``_Server`` overrides it. If uvicorn stops calling
it, the override is dead and uvicorn would take SIGTERM away from the drain: this fails."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import uvicorn

from services.gateway.server import _Server


async def _app(scope, receive, send) -> None:  # never called
    raise AssertionError


async def _serve(server: uvicorn.Server) -> int | signal.Handlers | None:
    """Start ``server``, return the SIGTERM handler while it serves, stop it."""
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done()
        await asyncio.sleep(0.01)
    handler = signal.getsignal(signal.SIGTERM)
    server.should_exit = True
    await asyncio.wait_for(task, 10)
    return handler


def _config() -> uvicorn.Config:
    return uvicorn.Config(_app, host="127.0.0.1", port=0, lifespan="off", log_config=None)


async def test_uvicorn_serve_enters_capture_signals_and_the_gateway_server_installs_none():
    entered: list[str] = []

    class Probe(_Server):
        @contextlib.contextmanager
        def capture_signals(self):
            entered.append("capture_signals")
            with super().capture_signals():
                yield

    before = signal.getsignal(signal.SIGTERM)
    assert await _serve(Probe(_config())) is before
    assert entered == ["capture_signals"], (
        "uvicorn.Server.serve no longer enters Server.capture_signals: find where uvicorn "
        "installs its signal handlers now and keep them out of the gateway's server"
    )
    # the premise: uvicorn's own server does take SIGTERM while it serves (main thread)
    assert await _serve(uvicorn.Server(_config())) is not before
    assert signal.getsignal(signal.SIGTERM) is before
