"""start_event_stream: on uvicorn's request cycle the SSE head and the first chunk go out in
one socket write (built and checked by uvicorn's own send); any other ASGI server gets the
plain messages; asgi.ChunkWriter writes later chunks on such a cycle."""

from __future__ import annotations

import asyncio
import logging

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from services.gateway.asgi import chunk_writer, start_event_stream


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def cycle(transport: RecordingTransport) -> RequestResponseCycle:
    scope = {"type": "http", "method": "POST", "http_version": "1.1", "path": "/v1/completions",
             "headers": [], "client": ("127.0.0.1", 1), "query_string": b""}  # fmt: skip
    log = logging.getLogger("test")
    return RequestResponseCycle(
        scope, transport, FlowControl(transport), log, log, False,
        [(b"server", b"uvicorn")], asyncio.Event(), False, True, lambda: None,
    )  # fmt: skip


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    out: dict = {"headers": {}, "body": b""}

    class P:
        def on_header(self, name: bytes, value: bytes) -> None:
            out["headers"][name.decode().lower()] = value.decode()

        def on_body(self, body: bytes) -> None:
            out["body"] += body

    p = httptools.HttpResponseParser(P())
    p.feed_data(raw)
    return p.get_status_code(), out["headers"], out["body"]


async def test_uvicorn_gets_the_head_and_the_first_events_in_one_write():
    t = RecordingTransport()
    c = cycle(t)
    first = b'data: {"a": 1}\n\n'
    writer = await start_event_stream(c.send, {"x-request-id": "r1"}, first)
    assert writer is not None and len(t.writes) == 1
    status, headers, body = parse(t.writes[0])
    assert status == 200 and body == first
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["transfer-encoding"] == "chunked" and headers["x-request-id"] == "r1"
    assert c.transport is t and c.response_started and not c.response_complete
    # the rest of the stream goes through the cycle as usual
    await c.send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
    assert parse(b"".join(t.writes))[2] == first + b"data: [DONE]\n\n" and c.response_complete


async def test_a_paused_transport_or_no_first_chunk_writes_as_the_server_does():
    t = RecordingTransport()
    c = cycle(t)
    await start_event_stream(c.send, {}, b"")  # no events yet: the head alone
    assert len(t.writes) == 1 and parse(t.writes[0])[2] == b""
    t2 = RecordingTransport()
    c2 = cycle(t2)
    c2.flow.write_paused = True  # the client is slow: uvicorn's send waits for it
    c2.flow._is_writable_event.clear()
    task = asyncio.ensure_future(start_event_stream(c2.send, {}, b"data: {}\n\n"))
    await asyncio.sleep(0.01)
    assert t2.writes == [] and not task.done()
    c2.flow.write_paused = False
    c2.flow._is_writable_event.set()
    await asyncio.wait_for(task, 5.0)
    assert len(t2.writes) == 2 and parse(b"".join(t2.writes))[2] == b"data: {}\n\n"


async def test_any_other_server_gets_the_plain_messages():
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    assert await start_event_stream(send, {"x-a": "b"}, b"data: {}\n\n") is None
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1] == {"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True}
    assert (b"x-a", b"b") in sent[0]["headers"]


async def test_a_client_gone_before_the_write_gets_nothing():
    t = RecordingTransport()
    c = cycle(t)
    t.closing = True
    await start_event_stream(c.send, {}, b"data: {}\n\n")
    assert t.writes == [] and c.transport is t


async def test_chunk_writer_frames_chunks_on_a_started_uvicorn_response_only():
    t = RecordingTransport()
    c = cycle(t)
    assert chunk_writer(c.send) is None  # no head yet
    await start_event_stream(c.send, {}, b"data: {}\n\n")
    w = chunk_writer(c.send)
    assert w is not None and not w.paused
    w.write(b"data: 1\n\n")
    w.write(b"")  # nothing to frame: no empty chunk (it would end the response)
    await c.send({"type": "http.response.body", "body": b"", "more_body": False})
    status, _, body = parse(b"".join(t.writes))
    assert status == 200 and body == b"data: {}\n\ndata: 1\n\n" and len(t.writes) == 3
    w.write(b"late")  # after the end: dropped
    assert len(t.writes) == 3 and chunk_writer(c.send) is None

    async def plain(message: dict) -> None:
        pass

    assert chunk_writer(plain) is None


async def test_chunk_writer_drops_writes_once_the_client_is_gone_and_reports_pauses():
    t = RecordingTransport()
    c = cycle(t)
    await start_event_stream(c.send, {}, b"data: {}\n\n")
    w = chunk_writer(c.send)
    c.flow.write_paused = True
    assert w.paused
    c.disconnected = True
    assert not w.paused  # nobody to wait for
    w.write(b"data: 1\n\n")
    assert len(t.writes) == 1
