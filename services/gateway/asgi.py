"""Plain ASGI helpers for the proxy routes (served without a framework in between: no
routing table, middleware stack or response classes on the hot path)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping

from starlette.types import Receive, Scope, Send

SSE_CONTENT_TYPE = b"text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = b"application/json"


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first value of a repeated one)."""
    out: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1")
        if key not in out:
            out[key] = value.decode("latin-1")
    return out


class ClientDisconnected(Exception):
    """The client went away before the request body was complete."""


async def read_body(receive: Receive) -> bytes:
    """The whole request body. Raises :class:`ClientDisconnected`."""
    msg = await receive()
    if msg["type"] == "http.disconnect":
        raise ClientDisconnected
    body = msg.get("body", b"")
    if not msg.get("more_body", False):
        return body
    parts = [body]
    while msg.get("more_body", False):
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientDisconnected
        parts.append(msg.get("body", b""))
    return b"".join(parts)


def on_disconnect(send: Send, receive: Receive, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` once if the client disconnects before the response is complete
    (from now on: call it after the request body has been read). Returns the function that
    stops watching.

    Served by uvicorn (``send`` and ``receive`` are its request cycle's methods), no task
    waits for it: uvicorn's ``connection_lost`` marks the cycle ``disconnected`` and then
    sets the cycle's ``message_event`` (to wake a pending ``receive()``); that event is
    swapped for a :class:`_DisconnectHook`, which calls ``callback`` right there, in the
    protocol callback. Any other server: a task waits for ``receive()``'s
    ``http.disconnect`` (which it also returns once the response is complete; ``callback``
    is then not called, as the watch is stopped first)."""
    cycle = _uvicorn_cycle(send)
    if (
        cycle is not None
        and getattr(receive, "__self__", None) is cycle
        and isinstance(getattr(cycle, "message_event", None), asyncio.Event)
    ):
        if cycle.disconnected:
            callback()
            return _nothing
        hook = _DisconnectHook(cycle, callback)
        cycle.message_event = hook
        return hook.stop
    watch = asyncio.ensure_future(_disconnect_message(receive))

    def done(_: asyncio.Future) -> None:
        if not watch.cancelled() and watch.exception() is None:
            callback()

    watch.add_done_callback(done)
    return watch.cancel


def _nothing() -> None:
    pass


async def _disconnect_message(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _DisconnectHook(asyncio.Event):
    """uvicorn's cycle's ``message_event`` that also calls a callback when it is set for a
    disconnect (the cycle is ``disconnected`` by then). It starts set if the event it
    replaces was: uvicorn sets the event only to wake ``receive()``, which then reads the
    cycle's state itself.

    It holds the cycle by a weak reference: the cycle holds the hook, and a strong reference
    back would make every request's cycle (its scope, headers, transport) garbage in a
    reference cycle, freed only by a full collection; the soak showed such garbage piling up
    between full collections at ~1 KB per request."""

    def __init__(self, cycle, callback: Callable[[], None]) -> None:
        super().__init__()
        self._cycle = weakref.ref(cycle)
        self._callback: Callable[[], None] | None = callback
        if cycle.message_event.is_set():
            super().set()

    def set(self) -> None:
        super().set()
        cb = self._callback
        cycle = self._cycle()
        if cb is not None and cycle is not None and cycle.disconnected:
            self._callback = None
            cb()

    def stop(self) -> None:
        self._callback = None


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes | str = JSON_CONTENT_TYPE,
    headers: Mapping[str, str] | None = None,
) -> None:
    """A complete response with a body of known length."""
    if isinstance(content_type, str):
        content_type = content_type.encode("latin-1")
    raw = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    if headers:
        raw += _encode(headers)
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def start_event_stream(
    send: Send, headers: Mapping[str, str], first: bytes = b""
) -> ChunkWriter | None:
    """The status line and headers of an SSE response (chunked), then ``first`` (the first
    events' bytes; none if empty) as its first chunk. Returns the response's
    :func:`chunk_writer` (None when the server is not uvicorn).

    Served by uvicorn (``send`` is its request cycle's method, which writes the head to the
    socket at once), both go out in one socket write: the server's own ``send`` builds and
    checks them as usual while the cycle's transport is swapped for one that holds the
    writes, for the duration of those two calls, which do not suspend when the transport is
    not paused. One write and, on loopback, one wake-up of the client less per streamed
    request, on the way to its first token. Any other server gets the two messages plainly."""
    raw = [(b"content-type", SSE_CONTENT_TYPE), (b"cache-control", b"no-cache"), *_encode(headers)]
    start = {"type": "http.response.start", "status": 200, "headers": raw}
    body = {"type": "http.response.body", "body": first, "more_body": True}
    cycle = _uvicorn_cycle(send)
    if first and cycle is not None and not cycle.flow.write_paused:
        transport = cycle.transport
        held = _HeldWrites(transport)
        cycle.transport = held
        try:
            await send(start)
            await send(body)
        finally:
            cycle.transport = transport
        held.release()
    else:
        await send(start)
        if first:
            await send(body)
    return chunk_writer(send)


def _uvicorn_cycle(send: Send):
    """uvicorn's request cycle when ``send`` is its method (with the attributes used here:
    ``transport``, ``flow.write_paused``, ``disconnected``, ``response_complete``), else
    None."""
    cycle = getattr(send, "__self__", None)
    if (
        hasattr(getattr(cycle, "transport", None), "write")
        and isinstance(getattr(getattr(cycle, "flow", None), "write_paused", None), bool)
        and isinstance(getattr(cycle, "disconnected", None), bool)
        and isinstance(getattr(cycle, "response_complete", None), bool)
    ):
        return cycle
    return None


class ChunkWriter:
    """Writes chunks of a started chunked response straight to uvicorn's transport,
    synchronously (from a protocol callback): what uvicorn's ``send`` does for a body
    message with more to come, without a message and a coroutine per chunk. Nothing is
    written once the client is gone or the response complete. ``paused``: the client's
    socket buffer is full (uvicorn's flow control); ``drain()`` waits until it is not.
    The response is ended with uvicorn's ``send`` as usual."""

    __slots__ = ("_cycle", "_flow", "_transport")

    def __init__(self, cycle) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._flow = cycle.flow

    def write(self, data: bytes) -> None:
        c = self._cycle
        if data and not c.disconnected and not c.response_complete:
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    @property
    def paused(self) -> bool:
        return self._flow.write_paused and not self._cycle.disconnected

    async def drain(self) -> None:
        await self._flow.drain()


def chunk_writer(send: Send) -> ChunkWriter | None:
    """A :class:`ChunkWriter` when ``send`` is uvicorn's request cycle's, the head of a
    chunked response has gone out and the response is not complete; otherwise None (send
    each chunk as an ASGI message)."""
    cycle = _uvicorn_cycle(send)
    if (
        cycle is not None
        and getattr(cycle, "response_started", None) is True
        and getattr(cycle, "chunked_encoding", None) is True
        and not cycle.response_complete
        and not cycle.disconnected
        and cycle.scope.get("method") != "HEAD"
    ):
        return ChunkWriter(cycle)
    return None


class _HeldWrites:
    """A transport stand-in that holds what is written until :meth:`release`."""

    __slots__ = ("_parts", "_transport")

    def __init__(self, transport) -> None:
        self._transport = transport
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self._parts.append(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def release(self) -> None:
        if self._parts and not self._transport.is_closing():
            self._transport.write(b"".join(self._parts))
        self._parts.clear()
