"""NATS, JetStream and Redis connection helpers shared by every service."""

from __future__ import annotations

import logging
from collections.abc import Callable

import nats
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared.subjects import Names

log = logging.getLogger(__name__)


async def connect_nats(
    url: str,
    name: str,
    *,
    connect_timeout: float = 2.0,
    on_disconnected: Callable[[], None] | None = None,
    on_reconnected: Callable[[], None] | None = None,
) -> NATS:
    """Connect with unlimited reconnects; errors and reconnects are logged, not raised.
    ``on_disconnected``/``on_reconnected`` are called (synchronously) as the connection is
    lost and back."""

    async def _error(e: Exception) -> None:
        log.warning("nats error (%s): %s", name, e)

    nc: NATS

    async def _disconnected() -> None:
        closing = nc.is_closed or nc.is_draining
        log.log(logging.INFO if closing else logging.WARNING, "nats disconnected (%s)", name)
        if on_disconnected is not None:
            on_disconnected()

    async def _reconnected() -> None:
        log.info("nats reconnected (%s)", name)
        if on_reconnected is not None:
            on_reconnected()

    nc = await nats.connect(
        url,
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        error_cb=_error,
        disconnected_cb=_disconnected,
        reconnected_cb=_reconnected,
    )
    return nc


async def ensure_samples_stream(
    js: JetStreamContext, names: Names, *, max_age_s: float = 24 * 3600, max_msgs: int = 1_000_000
) -> None:
    """Create (or leave in place) the JetStream stream that carries training samples.

    ``duplicate_window`` makes the publisher's ``Nats-Msg-Id`` (the request id) de-duplicate
    retried publications.
    """
    config = StreamConfig(
        name=names.samples_stream,
        subjects=[names.samples_wildcard],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=max_age_s,
        max_msgs=max_msgs,
        duplicate_window=120.0,
    )
    try:
        await js.stream_info(names.samples_stream)
    except NotFoundError:
        await js.add_stream(config)
        log.info("created JetStream stream %s", names.samples_stream)


def connect_redis(url: str) -> aioredis.Redis:
    """An asyncio Redis client returning bytes (model blobs are binary)."""
    return aioredis.from_url(url, decode_responses=False, socket_connect_timeout=2.0)
