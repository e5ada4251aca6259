"""asgi.on_disconnect and limits.read_body against real uvicorn servers on loopback (httptools,
the gateway's parser, and h11).

The fence around uvicorn's internals: on its request cycle the disconnect is seen without a
task because uvicorn's ``connection_lost`` sets ``cycle.disconnected`` and then calls
``cycle.message_event.set()``, and the cycle's ``send``/``receive`` are its bound methods. If
a uvicorn upgrade changes that, ``test_uvicorn_disconnect_is_seen_in_connection_lost`` fails
and names the assumption. Any other server (here: wrapped send/receive, as OpenTelemetry's
middleware does) gets a task waiting for ``http.disconnect``."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import uvicorn

from services.gateway import asgi, limits

pytestmark = pytest.mark.timeout(30)


class App:
    """Reads the body, watches for a disconnect, then waits for ``release`` (or answers at
    once with ``respond_at_once``)."""

    def __init__(self, wrap: bool = False, respond_at_once: bool = False) -> None:
        self.wrap = wrap
        self.respond_at_once = respond_at_once
        self.events: list[str] = []
        self.hooked: list[bool] = []
        self.watching = asyncio.Event()
        self.gone = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        assert scope["type"] == "http"
        if self.wrap:  # a middleware in between: not uvicorn's bound methods any more
            inner_receive, inner_send = receive, send

            async def receive():
                return await inner_receive()

            async def send(msg):
                await inner_send(msg)

        try:
            body = await limits.read_body(receive, {}, 1 << 20)
        except asgi.ClientDisconnected:
            self.events.append("body_interrupted")
            self.gone.set()
            return
        self.events.append(f"body:{len(body)}")

        def on_gone() -> None:
            self.events.append("gone")
            self.gone.set()

        stop = asgi.on_disconnect(send, receive, on_gone)
        cycle = asgi._uvicorn_cycle(send)
        self.hooked.append(
            cycle is not None and isinstance(cycle.message_event, asgi._DisconnectHook)
        )
        self.watching.set()
        if not self.respond_at_once:
            await self.release.wait()
        stop()
        await asgi.send_bytes(send, 200, b"{}")
        self.finished.set()


@contextlib.asynccontextmanager
async def serve(app: App, http: str):
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=http, lifespan="off",
                            log_config=None, access_log=False)  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "server did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.should_exit = True
        app.release.set()
        await asyncio.wait_for(task, 10)


def request(body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return (b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (n, body))  # fmt: skip


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_uvicorn_disconnect_is_seen_in_connection_lost(http):
    app = App()
    async with serve(app, http) as port:
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request(b'{"a": 1}'))
        await w.drain()
        await asyncio.wait_for(app.watching.wait(), 5)
        assert app.hooked == [True], (
            "uvicorn's cycle no longer exposes send/receive as bound methods with "
            "transport/flow/disconnected/response_complete/message_event"
        )
        w.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(app.gone.wait(), 5)
        assert app.events == ["body:8", "gone"], (
            "uvicorn's connection_lost no longer sets cycle.disconnected and then "
            "cycle.message_event: the gateway would not see disconnects"
        )


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_a_complete_response_then_a_close_is_no_disconnect(http):
    app = App(respond_at_once=True)
    async with serve(app, http) as port:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request(b"{}"))
        await w.drain()
        await asyncio.wait_for(app.finished.wait(), 5)
        assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        w.close()
        await asyncio.sleep(0.1)
        assert app.events == ["body:2"]


async def test_other_servers_get_a_task_waiting_for_http_disconnect():
    app = App(wrap=True)
    async with serve(app, "httptools") as port:
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request(b"{}"))
        await w.drain()
        await asyncio.wait_for(app.watching.wait(), 5)
        assert app.hooked == [False]
        w.close()
        await asyncio.wait_for(app.gone.wait(), 5)
        assert app.events == ["body:2", "gone"]


async def test_a_stopped_watch_is_not_called():
    app = App(wrap=True, respond_at_once=True)
    async with serve(app, "httptools") as port:
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request(b"{}"))
        await w.drain()
        await asyncio.wait_for(app.finished.wait(), 5)
        w.close()
        await asyncio.sleep(0.1)
        assert app.events == ["body:2"]


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_leaving_while_the_body_is_sent_is_a_disconnect(http):
    app = App()
    async with serve(app, http) as port:
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(request(b'{"prompt": "', length=1000))  # 988 bytes still to come
        await w.drain()
        await asyncio.sleep(0.05)
        w.close()
        await asyncio.wait_for(app.gone.wait(), 5)
        assert app.events == ["body_interrupted"]
