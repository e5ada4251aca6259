"""The proxy's push-mode streaming (services/gateway/proxy.py ``_Exchange._push``: events
forwarded from the pod connection's callbacks through asgi.ChunkWriter on uvicorn) against
raw TCP pods with scripted replies, through the real gateway and real NATS: the client gets
exactly what the message-by-message path gives it, an error event mid-piece, the read
timeout, and a slow client pausing the pod connection without losing a byte."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import orjson
import pytest

from services.gateway import asgi, proxy
from services.gateway.upstream import UpstreamStream
from tests.integration.gateway_harness import MODEL, gateway_stack, wait_for
from tests.integration.test_gateway_pod_client import _raw_pod, _read_request, chunk

pytestmark = pytest.mark.timeout(60)

CMPL = "/v1/completions"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def event(i: int, text: str | None = None) -> bytes:
    body = {"id": "c1", "object": "text_completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "text": text if text is not None else f" t{i}",
                         "finish_reason": None}]}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = b"data: " + orjson.dumps(
    {"id": "c1", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
     "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}
) + b"\n\n"  # fmt: skip

# pieces as the pod writes them: one event; three in one write; one split across writes
# (and across the chunked framing); CRLF line ends; the usage chunk with [DONE]
SCRIPT = [
    chunk(event(0)),
    chunk(event(1) + event(2) + event(3)),
    chunk(event(4)[:20]),
    chunk(event(4)[20:]),
    chunk(event(5).replace(b"\n", b"\r\n")),
    chunk(USAGE + b"data: [DONE]\n\n") + b"0\r\n\r\n",
]


def scripted_pod(pieces: list[bytes], gap_s: float = 0.01, then_silent: bool = False):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: one scripted reply per request
            try:
                await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(HEAD)
            for p in pieces:
                writer.write(p)
                await writer.drain()
                await asyncio.sleep(gap_s)
            if then_silent:
                await asyncio.sleep(30)
                return

    return handler


async def raw_pod(handler):
    """A raw TCP pod and the record the gateway's snapshot names it by."""
    server, url = await _raw_pod(handler)
    return server, SimpleNamespace(name="raw-0", url=url)


async def test_push_and_message_paths_give_the_client_the_same_stream(isolated, monkeypatch):
    server, pod = await raw_pod(scripted_pod(SCRIPT))
    pushed = 0
    real_push = proxy._Exchange._push

    async def counting_push(self, writer):
        nonlocal pushed
        pushed += 1
        return await real_push(self, writer)

    monkeypatch.setattr(proxy._Exchange, "_push", counting_push)
    try:
        async with gateway_stack(isolated, n_pods=0) as st:
            await st.snapshot(pods=[pod])
            body = {"model": MODEL, "prompt": "x", "max_tokens": 6, "stream": True}
            status, h, via_push = await st.stream(CMPL, body)
            assert status == 200 and h["x-headroom-pod"] == "raw-0" and pushed == 1
            monkeypatch.setattr(asgi, "_uvicorn_cycle", lambda send: None)  # another server
            status, _, via_messages = await st.stream(CMPL, body)
            assert status == 200 and pushed == 1
            texts = [e["choices"][0]["text"] for e in via_push[:-1]]
            assert texts == [f" t{i}" for i in range(6)] and via_push[-1] == "[DONE]"
            assert via_push == via_messages  # usage-only chunk dropped on both paths
            s = await st.samples(2)
            assert [x.output_tokens for x, _ in s] == [5, 5]
            assert all(x.ttft_ms is not None and x.tpot_ms is not None for x, _ in s)
            await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="settled")
    finally:
        server.close()


async def test_an_error_event_in_a_piece_ends_the_stream_after_the_events_before_it(isolated):
    err = b'data: {"error": {"message": "engine died", "code": 500}}\n\n'
    script = [chunk(event(0)), chunk(event(1) + err + event(2)) + b"0\r\n\r\n"]
    server, pod = await raw_pod(scripted_pod(script))
    try:
        async with gateway_stack(isolated, n_pods=0) as st:
            await st.snapshot(pods=[pod])
            body = {"model": MODEL, "prompt": "x", "max_tokens": 6, "stream": True}
            status, _, events = await st.stream(CMPL, body)
            assert status == 200
            assert [e["choices"][0]["text"] for e in events[:-1]] == [" t0", " t1"]
            assert events[-1]["error"]["code"] == "pod_stream_failed"
            m = await st.metrics()
            assert m[("headroom_gateway_requests_failed_total",
                      (("reason", "mid_stream_error_event"),))] == 1  # fmt: skip
    finally:
        server.close()


async def test_a_pod_that_falls_silent_mid_stream_times_out(isolated):
    server, pod = await raw_pod(scripted_pod(SCRIPT[:2], then_silent=True))
    try:
        async with gateway_stack(isolated, n_pods=0, pod_read_timeout_s=0.3) as st:
            await st.snapshot(pods=[pod])
            body = {"model": MODEL, "prompt": "x", "max_tokens": 6, "stream": True}
            status, _, events = await asyncio.wait_for(st.stream(CMPL, body), 10)
            assert status == 200 and len(events) == 5
            assert "no data from the pod" in events[-1]["error"]["message"]
            await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="settled")
    finally:
        server.close()


async def test_a_slow_client_pauses_the_pod_connection_and_loses_nothing(isolated, monkeypatch):
    n_events, fat = 6000, "x" * 2000  # ~12.6 MB: more than the sockets buffer
    pieces = [chunk(b"".join(event(i, fat) for i in range(j, j + 50)))
              for j in range(0, n_events, 50)]  # fmt: skip
    pieces[-1] += chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    server, pod = await raw_pod(scripted_pod(pieces, gap_s=0))
    pauses = resumes = 0
    real_pause, real_resume = UpstreamStream.pause_reading, UpstreamStream.resume_reading

    def pause(self):
        nonlocal pauses
        pauses += 1
        real_pause(self)

    def resume(self):
        nonlocal resumes
        resumes += 1
        real_resume(self)

    monkeypatch.setattr(UpstreamStream, "pause_reading", pause)
    monkeypatch.setattr(UpstreamStream, "resume_reading", resume)
    try:
        async with gateway_stack(isolated, n_pods=0) as st:
            await st.snapshot(pods=[pod])
            host, port = st.url.split("//")[1].split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await loop.sock_connect(sock, (host, int(port)))
            req = orjson.dumps({"model": MODEL, "prompt": "x", "max_tokens": n_events,
                                "stream": True})  # fmt: skip
            await loop.sock_sendall(sock, b"POST %b HTTP/1.1\r\nhost: x\r\ncontent-type: "
                                    b"application/json\r\ncontent-length: %d\r\n\r\n%b"
                                    % (CMPL.encode(), len(req), req))  # fmt: skip
            await asyncio.sleep(0.2)
            await wait_for(lambda: pauses >= 1, 10, "the pod connection paused")
            received = bytearray()
            while not received.endswith(b"0\r\n\r\n"):
                data = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 10)
                assert data, "the gateway closed the connection"
                received += data
            sock.close()
            body = received.split(b"\r\n\r\n", 1)[1]
            assert body.count(fat.encode()) == n_events and b"data: [DONE]" in body
            assert resumes >= pauses >= 1
            await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="settled")
    finally:
        server.close()
