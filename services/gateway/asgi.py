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


async def start_event_stream(send: Send, headers: Mapping[str, str]) -> None:
    """The status line and headers of an SSE response (chunked)."""
    raw = [(b"content-type", SSE_CONTENT_TYPE), (b"cache-control", b"no-cache"), *_encode(headers)]
    await send({"type": "http.response.start", "status": 200, "headers": raw})
