"""Plain ASGI helpers for the proxy routes (served without a framework in between: no
routing table, middleware stack or response classes on the hot path)."""

from __future__ import annotations

from collections.abc import Mapping

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


async def read_body(receive: Receive) -> bytes:
    """The whole request body."""
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body", False):
        return body
    parts = [body]
    while msg.get("more_body", False):
        msg = await receive()
        if msg["type"] == "http.disconnect":
            break
        parts.append(msg.get("body", b""))
    return b"".join(parts)


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


async def start_event_stream(send: Send, headers: Mapping[str, str], first: bytes = b"") -> None:
    """The status line and headers of an SSE response (chunked), then ``first`` (the first
    events' bytes; none if empty) as its first chunk.

    Served by uvicorn (``send`` is its request cycle's method, which writes the head to the
    socket at once), both go out in one socket write: the server's own ``send`` builds and
    checks them as usual while the cycle's transport is swapped for one that holds the
    writes, for the duration of those two calls, which do not suspend when the transport is
    not paused. One write and, on loopback, one wake-up of the client less per streamed
    request, on the way to its first token. Any other server gets the two messages plainly."""
    raw = [(b"content-type", SSE_CONTENT_TYPE), (b"cache-control", b"no-cache"), *_encode(headers)]
    start = {"type": "http.response.start", "status": 200, "headers": raw}
    body = {"type": "http.response.body", "body": first, "more_body": True}
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    flow = getattr(cycle, "flow", None)
    if first and hasattr(transport, "write") and getattr(flow, "write_paused", True) is False:
        held = _HeldWrites(transport)
        cycle.transport = held  # type: ignore[union-attr]
        try:
            await send(start)
            await send(body)
        finally:
            cycle.transport = transport  # type: ignore[union-attr]
        held.release()
        return
    await send(start)
    if first:
        await send(body)


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
