"""services/gateway/pod_client.py against real servers: keep-alive reuse through the gateway
(simulated pods); raw TCP pods that misbehave (silence, garbage, closed keep-alive
connections, bodies delimited by length or by the end of the connection); push mode (a
listener fed from the protocol callbacks: backlog, pieces, end, letting go, pause, silence,
a connection closed mid-body)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.gateway.pod_client import ConnectTimeout, PodClient, PodIOError
from tests.integration.gateway_harness import MODEL, gateway_stack

CMPL = "/v1/completions"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _raw_pod(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


def _client(read_timeout_s: float = 5.0) -> PodClient:
    return PodClient(connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


async def test_the_gateway_reuses_one_connection_per_pod(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
        for stream in (True, False, True, False, True):
            if stream:
                status, _, events = await st.stream(CMPL, {**body, "stream": True})
                assert status == 200 and events[-1] == "[DONE]"
            else:
                status, _, reply = await st.post(CMPL, body)
                assert status == 200 and reply["choices"][0]["text"]
        assert st.gw.pod_client.connects == 1
        assert st.gw.pod_client.idle_connections() == 1


async def test_a_client_disconnect_drops_the_pod_connection(isolated):
    async with gateway_stack(isolated, n_pods=1) as st:
        await st.snapshot()
        body = {"model": MODEL, "prompt": "long answer", "max_tokens": 400, "stream": True}
        async with st.http.post(st.url + CMPL, json=body) as r:
            await r.content.readline()
            r.close()
        for _ in range(500):  # bounded: 5 s
            if st.gw.view.total_in_flight() == 0:
                break
            await asyncio.sleep(0.01)
        assert st.gw.pod_client.idle_connections() == 0  # not returned to the pool
        status, _, _ = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 200 and st.gw.pod_client.connects == 2


@contextlib.asynccontextmanager
async def _raw_client(
    handler: Handler, read_timeout_s: float = 5.0
) -> AsyncIterator[tuple[PodClient, str]]:
    """A raw pod running ``handler`` and a client for it (both closed afterwards)."""
    server, url = await _raw_pod(handler)
    client = _client(read_timeout_s=read_timeout_s)
    try:
        yield client, url
    finally:
        await client.close()
        server.close()


async def _post_fails(handler: Handler, match: str, read_timeout_s: float = 5.0) -> None:
    """A POST to a raw pod running ``handler`` raises PodIOError matching ``match``."""
    async with _raw_client(handler, read_timeout_s) as (client, url):
        with pytest.raises(PodIOError, match=match):
            await asyncio.wait_for(client.post(url, CMPL, b"{}", {}), 3)


async def test_a_silent_pod_times_out():
    async def silent(reader, writer):
        await _read_request(reader)
        await asyncio.sleep(5)

    await _post_fails(silent, "no data", read_timeout_s=0.2)


async def test_garbage_from_a_pod_is_an_error():
    async def garbage(reader, writer):
        await _read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    await _post_fails(garbage, "malformed")


async def test_a_keep_alive_connection_the_pod_closed_is_not_reused():
    served = 0

    async def once(reader, writer):
        nonlocal served
        await _read_request(reader)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # the pod ends the keep-alive connection after one response

    server, url = await _raw_pod(once)
    client = _client()
    try:
        for _ in range(2):
            resp = await asyncio.wait_for(client.post(url, CMPL, b"{}", {}), 3)
            assert resp.status == 200 and await resp.read(100) == b"ok"
            resp.release()
            await asyncio.sleep(0.1)  # the FIN arrives
        assert served == 2 and client.connects == 2
    finally:
        await client.close()
        server.close()


async def test_length_and_close_delimited_bodies_and_request_bytes():
    seen: list[bytes] = []

    async def pod(reader, writer):
        seen.append(await _read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
        seen.append(await _read_request(reader))  # the same connection, kept alive
        writer.write(b"HTTP/1.0 400 Bad Request\r\ncontent-type: application/json; x=1\r\n\r\n")
        writer.write(b'{"error": "bad"}')
        await writer.drain()
        writer.close()  # the body ends with the connection

    server, url = await _raw_pod(pod)
    client = _client()
    try:
        resp = await client.post(url + "/base/", CMPL, b'{"a":1}', {"x-request-id": "r1"})
        assert (resp.status, await resp.read(100), resp.complete) == (200, b"hello", True)
        resp.release()
        resp = await client.post(url, CMPL, b"{}", {})
        assert resp.status == 400 and resp.content_type == "application/json"
        assert await resp.read(100) == b'{"error": "bad"}'
        resp.release()  # not kept: HTTP/1.0, ended by close
        assert client.connects == 1 and client.idle_connections() == 0
        first = seen[0]
        assert first.startswith(b"POST /base/v1/completions HTTP/1.1\r\n")
        assert b"\r\nx-request-id: r1\r\n" in first and first.endswith(b'\r\n\r\n{"a":1}')
        with pytest.raises(PodIOError, match="line break"):
            await client.post(url, CMPL, b"{}", {"x-evil": "a\r\nb: c"})
    finally:
        await client.close()
        server.close()


async def test_a_refused_connection_is_an_error():
    server, url = await _raw_pod(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    client = _client()
    try:
        with pytest.raises(PodIOError, match="connect"):
            await client.post(url, CMPL, b"{}", {})
    finally:
        await client.close()


class _Listener:
    """Records what a push-mode response hands over."""

    def __init__(self, resp=None, let_go_on: bytes | None = None) -> None:
        self.data = bytearray()
        self.ends: list[PodIOError | None] = []
        self.resp, self.let_go_on = resp, let_go_on

    def on_piece(self, piece: bytes) -> None:
        self.data += piece
        if self.let_go_on is not None and self.let_go_on in self.data:
            self.resp.unlisten()  # as the stream pump does at [DONE]

    def on_end(self, error: PodIOError | None) -> None:
        self.ends.append(error)

    async def ended(self) -> None:
        for _ in range(500):  # bounded: 5 s
            if self.ends:
                return
            await asyncio.sleep(0.01)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked HTTP body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def scripted(*steps: bytes | float) -> Handler:
    """A raw pod that reads one request, then writes each bytes step and sleeps each number
    of seconds, in order."""

    async def pod(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        for step in steps:
            if isinstance(step, bytes):
                writer.write(step)
                await writer.drain()
            else:
                await asyncio.sleep(step)

    return pod


@contextlib.asynccontextmanager
async def _posted(pod: Handler, read_timeout_s: float = 5.0) -> AsyncIterator[tuple]:
    """A raw pod, a client and the response of one POST to it."""
    async with _raw_client(pod, read_timeout_s) as (client, url):
        yield client, await client.post(url, CMPL, b"{}", {})


async def test_push_mode_hands_over_the_backlog_then_pieces_then_the_end():
    pod = scripted(
        CHUNKED_HEAD + chunk(b"one,") + chunk(b"two,"),  # with the head
        0.05, chunk(b"three"), 0.05, b"0\r\n\r\n", 5.0,
    )  # fmt: skip
    async with _posted(pod) as (client, resp):
        rec = _Listener()
        resp.listen(rec)
        assert bytes(rec.data) == b"one,two,"  # what arrived with the head, at once
        await rec.ended()
        assert bytes(rec.data) == b"one,two,three" and rec.ends == [None] and resp.complete
        resp.release()
        assert client.idle_connections() == 1


async def test_a_listener_that_lets_go_in_the_backlog_is_not_called_again():
    pod = scripted(CHUNKED_HEAD + chunk(b"a,[END]"), 0.05, chunk(b"tail") + b"0\r\n\r\n", 5.0)
    async with _posted(pod) as (_, resp):
        rec = _Listener(resp, let_go_on=b"[END]")
        resp.listen(rec)
        assert bytes(rec.data) == b"a,[END]" and rec.ends == []
        assert await resp.read(100) == b"tail"  # pull mode again: buffered for read_piece
        assert rec.ends == [] and resp.complete


async def test_push_mode_pauses_and_times_out_on_silence_only_while_listening():
    # "y" arrives while the reader is paused, then silence
    pod = scripted(CHUNKED_HEAD + chunk(b"x"), 0.1, chunk(b"y"), 30.0)
    async with _posted(pod, read_timeout_s=0.3) as (_, resp):
        rec = _Listener()
        resp.listen(rec)
        resp.pause_reading()
        await asyncio.sleep(0.6)  # longer than the read timeout: paused, so no failure
        assert bytes(rec.data) == b"x" and rec.ends == []
        resp.resume_reading()
        await rec.ended()
        assert bytes(rec.data) == b"xy"
        assert len(rec.ends) == 1 and "no data from the pod" in str(rec.ends[0])


async def test_push_mode_reports_a_connection_closed_mid_body():
    async def pod(reader, writer):
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"x"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()

    async with _posted(pod) as (_, resp):
        rec = _Listener()
        resp.listen(rec)
        await rec.ended()
        assert bytes(rec.data) == b"x"
        assert len(rec.ends) == 1 and "closed the connection" in str(rec.ends[0])


@contextlib.asynccontextmanager
async def _full_accept_queue() -> AsyncIterator[tuple[socket.socket, str, list]]:
    """A real listener with backlog 1 whose accept queue the test fills (2 connections the
    kernel completed that nobody accepts): further SYNs are dropped, as when a pod's event
    loop is too busy to accept a flood of connections. Yields the listening socket (the test
    accepts from it what it wants), its URL and the filler connections."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lsock.setblocking(False)
    url = f"http://127.0.0.1:{lsock.getsockname()[1]}"
    fillers: list = []
    try:
        yield lsock, url, fillers
    finally:
        for wr in fillers:
            wr.close()
        lsock.close()


async def _fill(url: str, fillers: list) -> None:
    port = int(url.rsplit(":", 1)[1])
    for _ in range(3):  # backlog 1 holds 2; the third waits in SYN-SENT (or times out)
        try:
            _, wr = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.3)
            fillers.append(wr)
        except TimeoutError:
            pass


CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def _answered(lsock: socket.socket, post, head: bytes):
    """Start ``post`` (a PodClient.post coroutine), accept its connection on ``lsock``, read
    the request and answer with ``head``: (the pod's end of the connection, the response)."""
    loop = asyncio.get_running_loop()
    first = asyncio.ensure_future(post)
    conn, _ = await asyncio.wait_for(loop.sock_accept(lsock), 3)
    conn.setblocking(False)
    await loop.sock_recv(conn, 65536)
    await loop.sock_sendall(conn, head)
    return conn, await asyncio.wait_for(first, 3)


async def test_a_connect_timeout_to_a_pod_streaming_to_us_is_busy_not_dead():
    """The pod streams a reply on one connection (data keeps coming) while its accept queue
    is full: a new connect times out, and the error says the pod is alive (``busy``), so the
    gateway does not eject it (services/gateway/upstream.py CONNECT_BUSY)."""
    loop = asyncio.get_running_loop()
    async with _full_accept_queue() as (lsock, url, fillers):
        client = PodClient(connect_timeout_s=0.6, read_timeout_s=5.0)
        try:
            conn, resp = await _answered(lsock, client.post(url, CMPL, b"{}", {}), CHUNKED)
            stop = asyncio.Event()

            async def trickle() -> None:  # a token every 50 ms until told to stop
                while not stop.is_set():
                    await loop.sock_sendall(conn, b"5\r\ndata:\r\n")
                    await asyncio.sleep(0.05)

            streaming = asyncio.ensure_future(trickle())
            reading = asyncio.ensure_future(_drain(resp))
            await _fill(url, fillers)
            with pytest.raises(ConnectTimeout, match="busy") as busy:
                await asyncio.wait_for(client.post(url, CMPL, b"{}", {}), 3)
            assert busy.value.busy
            # the same pod once it stopped sending: a timeout now is not "busy"
            stop.set()
            await streaming
            await asyncio.sleep(0.1)
            with pytest.raises(ConnectTimeout) as silent:
                await asyncio.wait_for(client.post(url, CMPL, b"{}", {}), 3)
            assert not silent.value.busy and "busy" not in str(silent.value)
            reading.cancel()
            resp.close()
            conn.close()
        finally:
            await client.close()


async def _drain(resp) -> None:
    with contextlib.suppress(PodIOError):
        while await resp.read_piece():
            pass


async def test_a_stream_that_ended_before_the_connect_does_not_make_the_pod_busy():
    """Busy means data arrived while the connect waited: a pod that answered earlier (its
    connection since closed) and now accepts nothing is not alive by that test."""
    async with _full_accept_queue() as (lsock, url, fillers):
        client = PodClient(connect_timeout_s=0.5, read_timeout_s=5.0)
        try:
            head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            conn, resp = await _answered(lsock, client.post(url, CMPL, b"{}", {}), head)
            assert await resp.read(10) == b"ok"
            resp.close()  # closed: its last data is remembered per pod
            conn.close()
            await _fill(url, fillers)
            with pytest.raises(ConnectTimeout) as e:
                await asyncio.wait_for(client.post(url, CMPL, b"{}", {}), 3)
            assert not e.value.busy
        finally:
            await client.close()


async def _answer_ok(reader, writer) -> None:
    """A raw pod's handler: read the request, answer 200 ``ok``."""
    await _read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()


async def test_a_stalled_event_loop_does_not_fail_a_connect_the_pod_completed():
    """The connect timeout bounds the pod's handshake, not the gateway's own event loop: the
    loop stalls longer than the timeout right after the connect went out (a GC pause, a
    starved CPU), the kernel completes the handshake meanwhile, and the request goes on.
    (With ``asyncio.timeout`` around ``create_connection`` this raised a timeout.)"""

    server, url = await _raw_pod(_answer_ok)
    client = PodClient(connect_timeout_s=0.3, read_timeout_s=5.0)
    try:
        loop = asyncio.get_running_loop()
        for _ in range(3):
            loop.call_soon(time.sleep, 0.6)  # runs right after the connect is issued
            async with asyncio.timeout(5):  # (in this task: wait_for would start a new one)
                resp = await client.post(url, CMPL, b"{}", {})
            assert resp.status == 200 and await resp.read(10) == b"ok"
            resp.close()  # a new connection each time
        assert client.connects == 3
    finally:
        await client.close()
        server.close()


async def test_a_connect_the_pod_never_completes_still_times_out():
    """The other side of the rule above: a handshake that does not complete in time (the
    pod's accept queue is full) is a timeout, stalled loop or not."""
    async with _full_accept_queue() as (_, url, fillers):
        await _fill(url, fillers)
        client = PodClient(connect_timeout_s=0.3, read_timeout_s=5.0)
        try:
            asyncio.get_running_loop().call_soon(time.sleep, 0.6)
            with pytest.raises(ConnectTimeout, match="timed out"):
                async with asyncio.timeout(5):
                    await client.post(url, CMPL, b"{}", {})
        finally:
            await client.close()


async def test_closed_connections_leave_no_cyclic_garbage():
    """A pod connection the client closes (after a reply it does not keep, a failure, a
    client gone) is freed by reference counting: its parser holds its callbacks and its
    transport holds it, a cycle that otherwise waits for a full collection (the soak's
    remaining RSS growth: one such cycle per closed connection)."""
    import gc

    server, url = await _raw_pod(_answer_ok)
    client = PodClient(connect_timeout_s=2.0, read_timeout_s=5.0)
    try:
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(10):
                resp = await client.post(url, CMPL, b"{}", {})
                assert await resp.read(10) == b"ok"
                resp.close()  # dropped, not pooled
            await asyncio.sleep(0.1)  # the transports' connection_lost callbacks
            gc.collect()
            ours = [
                o for o in gc.garbage if type(o).__name__ in ("_Connection", "HttpResponseParser")
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert client.connects == 10 and not ours, len(ours)
    finally:
        await client.close()
        server.close()
