"""The gateway's HTTP/1.1 client for pods: keep-alive connections, one POST at a time each,
responses parsed by httptools (C) straight off the socket.

Built for the proxy's one job (POST a JSON body, read a streamed reply piece by piece) with
no per-piece machinery in between: each ``data_received`` appends the bytes and wakes the
reader, which takes everything that has arrived in one go; or, once a :class:`BodyListener`
listens (:meth:`PodResponse.listen`), hands each piece to it right in the callback (no task
wake-up per piece). Timeouts are the pod settings:
connect, and the longest silence while waiting for the response (checked lazily by one
timer per read, not re-armed per piece).

Errors are :class:`PodIOError` (connection refused/reset/closed, timeout, malformed HTTP).
A POST is never re-sent by the client: a request that fails is the caller's to retry on
another pod.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit

import httptools


class PodIOError(Exception):
    """The connection or the HTTP exchange with a pod failed."""


class FirstByteTimeout(PodIOError):
    """The pod sent no response head within the client's ``first_byte_timeout_s``."""


class ConnectTimeout(PodIOError):
    """The TCP connect did not complete within ``connect_timeout_s``. ``busy``: the pod sent
    this client data on another connection while the connect waited, so it is alive and
    slow to accept (its accept queue full under a flood), not dead or unreachable."""

    def __init__(self, message: str, busy: bool) -> None:
        super().__init__(message)
        self.busy = busy


class BodyListener(Protocol):
    """Receives a response body in push mode, from the connection's protocol callbacks."""

    def on_piece(self, piece: bytes) -> None:
        """Body bytes that just arrived (must not raise)."""

    def on_end(self, error: PodIOError | None) -> None:
        """The body is complete (``None``) or the exchange failed; called at most once."""


def _connected(sock: socket.socket) -> bool:
    """The socket's TCP handshake has completed without error."""
    try:
        sock.getpeername()
    except OSError:  # ENOTCONN: still connecting
        return False
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


class _Target:
    __slots__ = ("base_path", "family", "host", "host_header", "key", "port", "ssl")

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise PodIOError(f"unsupported pod URL {url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = u.scheme == "https"
        self.base_path = u.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if u.port is None else f"{host}:{self.port}"
        self.key = (self.host, self.port, self.ssl)
        try:  # an IP literal needs no resolution (pods are usually addressed so)
            ip = ipaddress.ip_address(self.host)
            self.family: int | None = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        except ValueError:
            self.family = None


class PodResponse:
    """Status and headers of a pod's reply; the body is read with :meth:`read_piece`. End it
    with :meth:`release` (reuse the connection: after the whole body) or :meth:`close`."""

    __slots__ = ("_conn", "headers", "read_piece", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers  # lower-case name -> value (the last of a repeated one)
        # Every body byte that arrived since the last call (waiting for some); b"" once the
        # body is complete. Raises PodIOError. (The connection's method itself: one call less
        # per piece on the streaming path.)
        self.read_piece = conn.read_piece

    @property
    def content_type(self) -> str:
        """The media type without parameters (``application/json`` when absent)."""
        raw = self.headers.get("content-type", "")
        return raw.split(";", 1)[0].strip().lower() or "application/json"

    @property
    def complete(self) -> bool:
        """The whole body has been received."""
        return self._conn.complete

    async def read(self, limit: int) -> bytes:
        """The body up to ``limit`` bytes."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (piece := await self.read_piece()):
            parts.append(piece)
            size += len(piece)
        return b"".join(parts)[:limit]

    def listen(self, listener: BodyListener) -> None:
        """Push mode: what has arrived is handed over at once, then each piece as it
        arrives, then the end; :meth:`read_piece` is not used meanwhile. The read timeout
        applies to silence while listening and not paused."""
        self._conn.listen(listener)

    def unlisten(self) -> None:
        """Back to pull mode (pieces are buffered for :meth:`read_piece` again)."""
        self._conn.listener = None

    def pause_reading(self) -> None:
        """Stop reading from the pod (the client is slow); the read timeout is suspended."""
        self._conn.pause()

    def resume_reading(self) -> None:
        self._conn.resume()

    def release(self) -> None:
        """Back to the pool if the body is complete and the connection can be kept."""
        self._conn.finish()

    def close(self) -> None:
        """Drop the connection (the pod sees the client go away)."""
        self._conn.abort()


class _Connection(asyncio.Protocol):
    def __init__(self, client: PodClient, key: tuple) -> None:
        self.client = client
        self.key = key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.error: PodIOError | None = None
        self.idle_since = 0.0
        self.heard_at = -1.0  # loop time of the last bytes received (kept across requests)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.pieces: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future | None = None
        self.last_data = 0.0
        self.in_use = False
        self.watchdog: asyncio.TimerHandle | None = None  # the read timeout while in use
        self.listener: BodyListener | None = None  # push mode (PodResponse.listen)

    # --- protocol callbacks (httptools and asyncio) ----------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.in_use:  # bytes nobody asked for: the connection cannot be trusted
            self.abort()
            return
        self.last_data = self.heard_at = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(PodIOError("pod answered with a protocol upgrade"))
        except httptools.HttpParserError as e:
            self._fail(PodIOError(f"malformed HTTP from the pod: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client._forget(self)
        try:
            if not self.in_use or self.complete:
                return
            if self.headers_done and self._close_delimited():
                self.on_message_complete()  # a body delimited by the end of the connection
                return
            why = f": {exc}" if exc else ""
            self._fail(PodIOError(f"pod closed the connection{why}"))
        finally:
            # the parser holds this protocol's bound callbacks and the transport holds the
            # protocol: drop both so a closed connection is freed by reference counting,
            # not left as a cycle for the rare full collection (~5 KB per connection: the
            # soak's remaining RSS growth, one cycle per connection the gateway closed)
            self.parser = None  # type: ignore[assignment]
            self.transport = None

    def pause_writing(self) -> None:  # requests are small; nothing to throttle
        pass

    def resume_writing(self) -> None:
        pass

    def on_status(self, status: bytes) -> None:
        pass

    def on_header(self, name: bytes, value: bytes) -> None:  # httptools joins split parts
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.listener is not None:
            self.listener.on_piece(body)
            return
        self.pieces.append(body)
        self.buffered += len(body)
        if self.buffered > self.client.max_buffered and not self.paused and self.transport:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        # llhttp's verdict is only valid inside the callback (the parser resets after it)
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True
        if self.listener is not None:
            self.listener.on_end(None)
        self._wake()

    # --- helpers ----------------------------------------------------------------------------
    def _close_delimited(self) -> bool:
        h = self.headers
        return "content-length" not in h and "chunked" not in h.get("transfer-encoding", "")

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, err: PodIOError) -> None:
        if self.error is None:
            self.error = err
        listener = self.listener
        self.abort()
        if listener is not None:
            listener.on_end(self.error)
        self._wake()

    async def _wait(self) -> None:
        """Wait for the next callback; PodIOError after ``read_timeout`` without data (the
        watchdog armed once per request fails the connection, which wakes the waiter)."""
        if self.error is not None:
            raise self.error
        if self.closed:
            raise PodIOError("pod closed the connection")
        self.waiter = fut = self.loop.create_future()
        try:
            await fut
        finally:
            self.waiter = None
        if self.error is not None:
            raise self.error

    def _check_silence(self) -> None:
        self.watchdog = None
        if not self.in_use or self.complete or self.error is not None:
            return
        timeout = self.client.silence_limit(self.headers_done)
        now = self.loop.time()
        waiting = self.waiter is not None or (self.listener is not None and not self.paused)
        if not waiting:  # nobody is waiting for data (the reader is busy, paused): later
            self.watchdog = self.loop.call_at(now + timeout, self._check_silence)
        elif now - self.last_data >= timeout:
            if timeout < self.client.read_timeout_s:  # the first-byte timeout ran out
                self._fail(FirstByteTimeout(f"no response from the pod within {timeout:g} s"))
            else:
                self._fail(PodIOError(f"no data from the pod for {timeout:g} s"))
        else:  # data came meanwhile: check again when the silence could have run out
            self.watchdog = self.loop.call_at(self.last_data + timeout, self._check_silence)

    def _disarm(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    # --- the exchange -------------------------------------------------------------------------
    async def request(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self.in_use = True
        self.last_data = self.loop.time()
        self._disarm()
        self.watchdog = self.loop.call_at(
            self.last_data + self.client.silence_limit(False), self._check_silence
        )
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)
        while not self.headers_done:
            await self._wait()

    async def read_piece(self) -> bytes:
        pieces = self.pieces
        while not pieces:
            if self.complete:
                return b""
            await self._wait()
        if len(pieces) == 1:
            piece = pieces.popleft()
        else:
            piece = b"".join(pieces)
            pieces.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return piece

    def listen(self, listener: BodyListener) -> None:
        self.listener = listener  # first: the listener may let go while taking the backlog
        self.resume()
        if self.pieces:
            piece = b"".join(self.pieces)
            self.pieces.clear()
            self.buffered = 0
            listener.on_piece(piece)
        if self.listener is not listener:
            return
        if self.error is not None:
            self.listener = None
            listener.on_end(self.error)
        elif self.complete:
            self.listener = None
            listener.on_end(None)
        elif self.closed:
            self.listener = None
            listener.on_end(PodIOError("pod closed the connection"))

    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            if not self.closed:
                self.transport.resume_reading()
                self.last_data = self.loop.time()  # the silence counts from now

    def finish(self) -> None:
        self._disarm()
        self.listener = None
        self.resume()  # never pooled paused
        if self.complete and self.error is None and not self.closed and not self.pieces:
            if self.keep_alive:
                self.client._put_back(self)
                return
        self.abort()

    def abort(self) -> None:
        self._disarm()
        self.listener = None
        self.in_use = False
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        self.client._forget(self)


class PodClient:
    """Keep-alive connections per pod (host, port), one request at a time each.

    An idle connection is reused for ``keepalive_s`` (default 4 s: under the 5 s idle
    timeout of uvicorn, which serves vLLM, so a pod rarely closes a connection just as a
    request goes out on it; a busy gateway reuses connections within milliseconds)."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_s: float = 4.0,
        max_idle_per_pod: int = 256,
        max_buffered: int = 1 << 20,
        first_byte_timeout_s: float | None = None,
    ) -> None:
        """``first_byte_timeout_s``: longest wait for the response head of a request (a
        pod that accepted the connection but hangs); None: ``read_timeout_s``."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.keepalive_s = keepalive_s
        self.max_idle_per_pod = max_idle_per_pod
        self.max_buffered = max_buffered
        self._targets: dict[str, _Target] = {}
        self._idle: dict[tuple, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._heard: dict[tuple, float] = {}  # pod -> when a closed connection last got data
        self._ssl: ssl.SSLContext | None = None
        self.connects = 0  # new connections made (for tests and benchmarks)
        self.closed = False

    def silence_limit(self, headers_done: bool) -> float:
        """How long a request may go without data: before its response head, the
        first-byte timeout (when set and shorter), after it the read timeout."""
        fb = self.first_byte_timeout_s
        if headers_done or fb is None or fb >= self.read_timeout_s:
            return self.read_timeout_s
        return fb

    def target(self, url: str) -> _Target:
        t = self._targets.get(url)
        if t is None:
            if len(self._targets) > 10_000:
                self._targets.clear()
            t = self._targets[url] = _Target(url)
        return t

    async def post(self, url: str, path: str, body: bytes, headers: dict[str, str]) -> PodResponse:
        """POST ``body`` to ``url`` (the pod's base URL) + ``path``; returns once the status
        and headers are in. Raises PodIOError."""
        if self.closed:
            raise PodIOError("the pod client is closed")
        t = self.target(url)
        head = [f"POST {t.base_path}{path} HTTP/1.1\r\nhost: {t.host_header}\r\n"]
        for k, v in headers.items():
            if "\r" in v or "\n" in v:
                raise PodIOError(f"header {k!r} has a line break")
            head.append(f"{k}: {v}\r\n")
        head.append(f"content-length: {len(body)}\r\n\r\n")
        conn = self._idle_connection(t.key) or await self._connect(t)
        try:
            await conn.request("".join(head).encode("latin-1"), body)
        except BaseException:
            conn.abort()
            raise
        return PodResponse(conn)

    def _idle_connection(self, key: tuple) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                conn._reset()
                return conn
            conn.abort()
        return None

    async def _connect(self, t: _Target) -> _Connection:
        loop = asyncio.get_running_loop()
        ctx = None
        if t.ssl:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        started = loop.time()
        try:
            sock = await self._tcp_connect(t, loop)
        except TimeoutError as e:
            busy = self.heard_from(t.key, started)
            why = " (the pod is serving other requests: busy)" if busy else ""
            raise ConnectTimeout(f"connect to {t.host}:{t.port} timed out{why}", busy) from e
        except OSError as e:
            raise PodIOError(f"connect to {t.host}:{t.port} failed: {e}") from e
        try:  # connected: the rest is local work, and TLS's handshake has its own bound
            _, conn = await loop.create_connection(
                lambda: _Connection(self, t.key), sock=sock, ssl=ctx,
                server_hostname=t.host if ctx else None,
                ssl_handshake_timeout=self.connect_timeout_s if ctx else None,
            )  # fmt: skip
        except BaseException as e:
            sock.close()
            if isinstance(e, OSError):
                raise PodIOError(f"connect to {t.host}:{t.port} failed: {e}") from e
            raise
        self.connects += 1
        self._open.add(conn)
        return conn

    async def _tcp_connect(self, t: _Target, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A connected TCP socket to the pod. The connect timeout bounds the pod's handshake,
        not this process's event loop: when the timer fires, a socket whose handshake the
        kernel completed meanwhile counts as connected. (Under CPU starvation or a long GC
        pause the loop can sit longer than the timeout between issuing a connect and seeing
        it complete, and a plain ``asyncio.timeout`` then fails a connection that took
        microseconds; the soak saw thousands of such "timeouts" to live pods.)"""
        timeout = self.connect_timeout_s
        if t.family is not None:
            addrs = [(t.family, (t.host, t.port))]
        else:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(t.host, t.port, type=socket.SOCK_STREAM)
            addrs = [(fam, sa) for fam, _, _, _, sa in infos]
        error: OSError | None = None
        for family, addr in addrs:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                try:
                    async with asyncio.timeout(timeout):
                        await loop.sock_connect(sock, addr)
                except TimeoutError:
                    if not _connected(sock):  # the pod did not complete the handshake
                        raise
                return sock
            except OSError as e:  # refused, unreachable: the next address, if any
                sock.close()
                error = e
            except BaseException:
                sock.close()
                raise
        raise error or OSError(f"no address for {t.host}")

    def heard_from(self, key: tuple, since: float) -> bool:
        """Whether a connection to the pod ``key`` received data at or after ``since`` (loop
        time). Scans the open connections: called on a connect timeout only."""
        if self._heard.get(key, -1.0) >= since:  # a connection that closed meanwhile
            return True
        return any(c.key == key and c.heard_at >= since for c in self._open)

    def _put_back(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= self.max_idle_per_pod or self.closed:
            conn.abort()
            return
        conn.in_use = False
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        if conn.heard_at > self._heard.get(conn.key, -1.0):
            if len(self._heard) > 10_000:
                self._heard.clear()
            self._heard[conn.key] = conn.heard_at

    def idle_connections(self) -> int:
        return sum(len(v) for v in self._idle.values())

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()
