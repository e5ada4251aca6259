"""A Redis that stops answering on an open connection (a network partition, a half-open
TCP connection, a stalled server) must not hang the predictor: every Redis command fails
after ``redis_timeout_s`` (redis-py waits forever by default), the version check logs and
returns, and once Redis answers again the next check loads the new version. Real NATS and
Redis; between the predictor and Redis a loopback TCP relay in the test that can go silent
(it keeps the connections open and drops what it gets, in both directions)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from services.predictor.service import PredictorService
from shared.bus import connect_nats, connect_redis
from tests.integration.test_predictor_service import publish_model
from tests.integration.trainer_harness import eventually, predictor_settings

pytestmark = pytest.mark.timeout(60)


class SilentRelay:
    """Relays TCP to ``host:port``; while ``silent`` it forwards nothing (and forgets what
    it read then), holding every connection open."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.silent = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(self.host, self.port)
        self._writers += [writer, up_w]
        for src, dst in ((reader, up_w), (up_r, writer)):
            t = asyncio.create_task(self._pump(src, dst))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await src.read(65536):
                if not self.silent:
                    dst.write(data)
                    await dst.drain()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for w in self._writers:
            w.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def test_a_silent_redis_times_out_and_the_next_check_loads_the_new_version(isolated, caplog):
    names = isolated["names"]
    real = urlsplit(isolated["redis_url"])
    relay = SilentRelay(real.hostname or "127.0.0.1", real.port or 6379)
    port = await relay.start()
    via_relay = urlunsplit(real._replace(netloc=f"127.0.0.1:{port}"))
    r = connect_redis(isolated["redis_url"])  # the test's own, straight to Redis
    nc = await connect_nats(isolated["nats_url"], "test")
    predictor = PredictorService(
        predictor_settings(
            {**isolated, "redis_url": via_relay}, "p0", redis_timeout_s=0.5, reload_interval_s=0.2
        )
    )
    try:
        await publish_model(r, nc, names, seed=1)
        await predictor.start()
        await eventually(lambda: predictor.slot.version == "v1")

        relay.silent = True
        await publish_model(r, nc, names, seed=2, announce=False)  # v2, unseen while silent
        with caplog.at_level(logging.WARNING, logger="services.predictor.service"):
            t0 = time.monotonic()
            # without a socket timeout this never returns (the reply is never coming)
            await asyncio.wait_for(predictor.check_current(), timeout=5.0)
            took = time.monotonic() - t0
        assert 0.4 <= took < 3.0, took
        assert any("could not read the current model version" in m for m in caplog.messages)
        assert predictor.slot.version == "v1"  # the last good model keeps serving

        relay.silent = False
        # the periodic check recovers on its own: new connections, the new version
        await eventually(lambda: predictor.slot.version == "v2", within=15.0)
    finally:
        await predictor.stop()
        await nc.close()
        await r.aclose()
        await relay.close()
