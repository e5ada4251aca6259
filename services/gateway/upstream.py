"""Streaming HTTP client side of the proxy: open a pod's SSE stream and read its events.

Failure classes (what the request flow does with them):

- :class:`PodFailure`: the pod failed before the first byte of the stream (connection
  refused/reset/timeout, HTTP >= 500, the stream broke or carried an error before its first
  event). Retryable on the next-ranked pod.
- :class:`PodRejected`: the pod answered 4xx. Not retried; passed through to the client.
- :class:`StreamBroken`: the stream failed after the first event (connection dropped, an
  error event, EOF without ``[DONE]``, an undecodable chunk).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

_NET_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


class PodFailure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PodRejected(Exception):
    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(f"pod answered HTTP {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class StreamBroken(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


Event = tuple[bytes, dict[str, Any]]  # raw data payload, decoded JSON object


class UpstreamStream:
    """Reads ``data:`` events from a pod's SSE response until ``[DONE]``."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.done = False

    async def next_event(self) -> Event | None:
        """The next event, or None after ``[DONE]``. Raises StreamBroken."""
        if self.done:
            return None
        data: list[bytes] = []
        try:
            while True:
                line = await self.resp.content.readline()
                if not line:
                    raise StreamBroken("eof", "pod closed the stream before [DONE]")
                line = line.rstrip(b"\r\n")
                if line:
                    if line.startswith(b"data:"):
                        data.append(line[5:].lstrip(b" "))
                    continue  # comments and other SSE fields are ignored
                if not data:
                    continue
                payload = b"\n".join(data)
                if payload == b"[DONE]":
                    self.done = True
                    return None
                return payload, _decode(payload)
        except StreamBroken:
            raise
        except _NET_ERRORS as e:
            raise StreamBroken("connection", f"pod stream failed: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        """Release (after [DONE]) or abort the connection. Synchronous, safe in finally."""
        if self.done:
            self.resp.release()
        else:
            self.resp.close()


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise StreamBroken("bad_chunk", f"pod sent a chunk that is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise StreamBroken("bad_chunk", "pod sent a chunk that is not a JSON object")
    if obj.get("error"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else str(err)
        raise StreamBroken("error_event", f"pod reported an error: {msg}")
    return obj


async def open_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    client_timeout: aiohttp.ClientTimeout,
) -> tuple[UpstreamStream, Event]:
    """POST ``body`` and read up to the first event. Raises PodFailure or PodRejected."""
    try:
        resp = await session.post(url, data=body, headers=headers, timeout=client_timeout)
    except _NET_ERRORS as e:
        raise PodFailure("connect", f"{type(e).__name__}: {e}") from e
    if resp.status >= 500:
        resp.close()
        raise PodFailure(f"http_{resp.status}", f"pod answered HTTP {resp.status}")
    if resp.status >= 400:
        try:
            data = await resp.content.read(65536)
        except _NET_ERRORS:
            data = b""
        finally:
            resp.close()
        raise PodRejected(resp.status, data, resp.content_type or "application/json")
    stream = UpstreamStream(resp)
    try:
        first = await stream.next_event()
    except StreamBroken as e:
        stream.close()
        raise PodFailure(f"before_first_event_{e.reason}", str(e)) from e
    if first is None:
        stream.close()
        raise PodFailure("empty_stream", "pod ended the stream without any event")
    return stream, first
