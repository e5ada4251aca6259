"""Streaming HTTP client side of the proxy: open a pod's SSE stream and read its events.

Failure classes (what the request flow does with them):

- :class:`PodFailure`: the pod failed before the first byte of the stream (connection
  refused/reset/timeout, HTTP >= 500, the stream broke or carried an error before its first
  event). Retryable on the next-ranked pod.
- :class:`PodRejected`: the pod answered 4xx. Not retried; passed through to the client.
- :class:`StreamBroken`: the stream failed after the first event (connection dropped, an
  error event, EOF without ``[DONE]``, an undecodable chunk).

The stream is read in whatever pieces the connection delivers (not line by line): every
event complete in a piece is returned at once, so events that arrived together are handled
(and forwarded) together. Read either by awaiting :meth:`UpstreamStream.next_events`, or by
:meth:`UpstreamStream.pump`, which decodes each piece in the pod connection's own callback and
hands its events on there (no task wake-up per piece: the proxy's streaming path). After
``[DONE]`` the rest of the response (the chunked-encoding terminator) is drained so the
keep-alive connection goes back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from services.gateway.pod_client import (
    ConnectTimeout,
    FirstByteTimeout,
    PodClient,
    PodIOError,
    PodResponse,
)

_EOF = "pod closed the stream before [DONE]"

_NET_ERRORS = (PodIOError, OSError, asyncio.TimeoutError, ValueError)
# a connect that timed out while the pod was sending us data on other connections: the pod
# is alive and slow to accept (overloaded), which is no reason to eject it
CONNECT_BUSY = "connect_busy"

# an SSE event longer than this (bytes, without its end) breaks the stream
MAX_EVENT_BYTES = 4 * 1024 * 1024
# how long to wait for the end of a response after [DONE] before dropping the connection
DRAIN_TIMEOUT_S = 1.0
# a whole (non-streamed) reply longer than this fails (2,048 embeddings of 4,096 floats fit)
MAX_REPLY_BYTES = 256 * 1024 * 1024


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


class SseDecoder:
    """Splits the bytes of an SSE stream, in whatever pieces they come, into the JSON
    payloads of its ``data:`` events up to ``[DONE]``. Pure (no I/O)."""

    __slots__ = ("_broken", "_buf", "_cr", "done")

    def __init__(self) -> None:
        self._buf = b""  # an incomplete event (normalised to \n line ends)
        self._cr = False  # the last piece ended in \r (a \n that follows is part of it)
        self.done = False  # [DONE] was seen
        self._broken: StreamBroken | None = None  # raised after the events before it

    @property
    def broken(self) -> StreamBroken | None:
        """The failure the next :meth:`feed` raises (set once the events before it were
        returned)."""
        return self._broken

    def feed(self, piece: bytes) -> list[Event]:
        """The events completed by ``piece``, in order (none after ``[DONE]``). Raises
        StreamBroken for an undecodable or error event (after returning the events that
        came before it in the same piece) or an event over MAX_EVENT_BYTES."""
        if self._broken is not None:
            raise self._broken
        if self.done:
            return []
        if (  # the usual piece: exactly one one-line "data: ..." event
            not self._buf
            and not self._cr
            and piece.startswith(b"data: ")
            and piece.find(b"\n") == len(piece) - 2
            and piece.endswith(b"\n\n")
            and b"\r" not in piece
        ):
            payload = piece[6:-2].lstrip(b" ")
            if payload == b"[DONE]":
                self.done = True
                return []
            return [(payload, _decode(payload))]
        if self._cr and piece.startswith(b"\n"):  # the \n of a \r\n split across pieces
            piece = piece[1:]
        self._cr = False
        if b"\r" in piece:  # CRLF or CR line ends: normalise to \n
            self._cr = piece.endswith(b"\r")
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + piece if self._buf else piece
        if b"\n\n" not in buf:
            if len(buf) > MAX_EVENT_BYTES:
                raise StreamBroken("bad_chunk", "pod sent an event larger than the limit")
            self._buf = buf
            return []
        *blocks, self._buf = buf.split(b"\n\n")
        events: list[Event] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:  # the usual one-line event
                payload = block[6:].lstrip(b" ")
            else:
                data = [
                    line[5:].lstrip(b" ")
                    for line in block.split(b"\n")
                    if line.startswith(b"data:")
                ]
                if not data:
                    continue  # comments, other SSE fields, blank lines
                payload = b"\n".join(data)
            if payload == b"[DONE]":
                self.done = True
                self._buf = b""
                break
            try:
                events.append((payload, _decode(payload)))
            except StreamBroken as e:
                if not events:
                    raise
                self._broken = e  # the events before it are delivered first
                break
        return events


class UpstreamStream:
    """Reads ``data:`` events from a pod's SSE response until ``[DONE]``."""

    __slots__ = ("_sse", "resp")

    def __init__(self, resp: PodResponse) -> None:
        self.resp = resp
        self._sse = SseDecoder()

    @property
    def done(self) -> bool:
        """``[DONE]`` was seen."""
        return self._sse.done

    async def next_events(self) -> list[Event]:
        """The events that are complete now (waiting for at least one), in order; after
        ``[DONE]`` the list holds the events before it (possibly none) and ``done`` is set,
        and every later call returns []. Raises StreamBroken."""
        sse = self._sse
        if sse.done:
            return []
        try:
            while True:
                piece = await self.resp.read_piece()
                if not piece:
                    raise StreamBroken("eof", _EOF)
                events = sse.feed(piece)
                if events or sse.done:
                    return events
        except StreamBroken:
            raise
        except _NET_ERRORS as e:
            raise StreamBroken("connection", f"pod stream failed: {type(e).__name__}: {e}") from e

    def pump(self, deliver: Callable[[list[Event], bool], None]) -> asyncio.Future:
        """Push mode: from now on each piece the connection receives is decoded in its
        callback and its events handed to ``deliver(events, final)`` there (``final``: the
        stream ended with them). The future resolves (None) after ``[DONE]``, or with the
        StreamBroken (or whatever ``deliver`` raised) that ended the stream; what ``deliver``
        got before a failure stands. Pull mode again once it resolves."""
        pump = _Pump(self._sse, self.resp, deliver)
        self.resp.listen(pump)
        return pump.done

    def pause_reading(self) -> None:
        """Stop reading the pod (push mode, while the client cannot take more)."""
        self.resp.pause_reading()

    def resume_reading(self) -> None:
        self.resp.resume_reading()

    async def release(self) -> None:
        """After [DONE]: read the rest of the response (the chunked terminator normally
        follows at once) so the connection can be reused, then release it; otherwise, or if
        the end does not come within DRAIN_TIMEOUT_S, drop the connection."""
        if not self.done:
            self.resp.close()
            return
        if not self.resp.complete:
            try:
                async with asyncio.timeout(DRAIN_TIMEOUT_S):
                    while await self.resp.read_piece():
                        pass
            except _NET_ERRORS:
                self.resp.close()
                return
            except asyncio.CancelledError:
                self.resp.close()
                raise
        self.resp.release()

    def close(self) -> None:
        """Abort the connection (a failed or abandoned exchange). Synchronous, safe in
        finally; a no-op after release."""
        with contextlib.suppress(Exception):
            self.resp.close()


class _Pump:
    """The BodyListener of :meth:`UpstreamStream.pump`."""

    __slots__ = ("_deliver", "_resp", "_sse", "done")

    def __init__(
        self, sse: SseDecoder, resp: PodResponse, deliver: Callable[[list[Event], bool], None]
    ) -> None:
        self._sse = sse
        self._resp = resp
        self._deliver = deliver
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_piece(self, piece: bytes) -> None:
        if self.done.done():
            return  # settled: the rest is not ours (the exchange ends the connection)
        sse = self._sse
        try:
            events = sse.feed(piece)
            if events or sse.done:
                self._deliver(events, sse.done)
        except Exception as e:  # StreamBroken, or the delivery failed
            self._settle(e)
            return
        if sse.done:
            self._settle(None)
        elif sse.broken is not None:  # an error event after the ones just delivered
            self._settle(sse.broken)

    def on_end(self, error: PodIOError | None) -> None:
        if self.done.done():
            return
        if error is not None:
            why = f"pod stream failed: {type(error).__name__}: {error}"
            self._settle(StreamBroken("connection", why))
        elif not self._sse.done:
            self._settle(StreamBroken("eof", _EOF))

    def _settle(self, error: Exception | None) -> None:
        self._resp.unlisten()
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


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


@dataclass(frozen=True, slots=True)
class PodReply:
    """A pod's whole 2xx reply (embeddings)."""

    status: int
    body: bytes
    content_type: str


async def _rejected(resp: PodResponse) -> PodRejected:
    try:
        data = await resp.read(65536)
    except _NET_ERRORS:
        data = b""
    finally:
        resp.close()
    return PodRejected(resp.status, data, resp.content_type)


async def fetch_reply(
    client: PodClient, url: str, path: str, body: bytes, headers: dict[str, str]
) -> PodReply:
    """POST ``body`` and read the pod's whole reply. Nothing reaches the client before it is
    complete, so every failure is a PodFailure (retryable); 4xx is PodRejected."""
    try:
        resp = await client.post(url, path, body, headers)
    except ConnectTimeout as e:
        raise PodFailure(CONNECT_BUSY if e.busy else "connect", str(e)) from e
    except _NET_ERRORS as e:
        raise PodFailure("connect", f"{type(e).__name__}: {e}") from e
    if resp.status >= 500:
        resp.close()
        raise PodFailure(f"http_{resp.status}", f"pod answered HTTP {resp.status}")
    if resp.status >= 400:
        raise await _rejected(resp)
    parts: list[bytes] = []
    size = 0
    try:
        while piece := await resp.read_piece():
            size += len(piece)
            if size > MAX_REPLY_BYTES:
                raise PodFailure("reply_too_large", f"pod reply over {MAX_REPLY_BYTES} bytes")
            parts.append(piece)
    except _NET_ERRORS as e:
        resp.close()
        raise PodFailure("reply_broken", f"pod reply failed: {type(e).__name__}: {e}") from e
    except BaseException:
        resp.close()
        raise
    resp.release()
    return PodReply(resp.status, b"".join(parts), resp.content_type)


async def open_stream(
    client: PodClient, url: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[UpstreamStream, list[Event]]:
    """POST ``body`` to the pod at ``url`` + ``path`` and read up to the first event(s)
    (``[DONE]`` may have come with them). Raises PodFailure or PodRejected."""
    try:
        resp = await client.post(url, path, body, headers)
    except FirstByteTimeout as e:
        raise PodFailure("first_byte_timeout", str(e)) from e
    except ConnectTimeout as e:
        raise PodFailure(CONNECT_BUSY if e.busy else "connect", str(e)) from e
    except _NET_ERRORS as e:
        raise PodFailure("connect", f"{type(e).__name__}: {e}") from e
    if resp.status >= 500:
        resp.close()
        raise PodFailure(f"http_{resp.status}", f"pod answered HTTP {resp.status}")
    if resp.status >= 400:
        raise await _rejected(resp)
    stream = UpstreamStream(resp)
    try:
        first = await stream.next_events()
    except StreamBroken as e:
        stream.close()
        raise PodFailure(f"before_first_event_{e.reason}", str(e)) from e
    except BaseException:
        stream.close()
        raise
    if not first:
        stream.close()
        raise PodFailure("empty_stream", "pod ended the stream without any event")
    return stream, first
