"""Shared fixtures: real NATS and Redis (embedded ones when none is reachable), and a unique
namespace per test so runs never see each other's streams, subjects or keys."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from shared import embedded
from shared.bus import connect_nats, connect_redis
from shared.model_store import delete_namespace
from shared.subjects import Names


@pytest.fixture(scope="session")
def infra():
    """URLs of a real NATS (with JetStream) and Redis. Never skips: starts embedded servers
    when the configured ones are unreachable, and fails loudly if that is impossible."""
    nats_url = os.environ.get("HEADROOM_NATS_URL", "nats://127.0.0.1:4222")
    redis_url = os.environ.get("HEADROOM_REDIS_URL", "redis://127.0.0.1:6379/0")
    started = []
    nats_url, s = embedded.ensure("nats", nats_url)
    started += [s] if s else []
    redis_url, s = embedded.ensure("redis", redis_url)
    started += [s] if s else []
    yield {"nats_url": nats_url, "redis_url": redis_url}
    for s in started:
        s.stop()


@pytest.fixture
def names() -> Names:
    return Names(f"hrt-{uuid.uuid4().hex[:10]}")


async def _cleanup(infra: dict, names: Names) -> None:
    nc = await connect_nats(infra["nats_url"], "test-cleanup")
    try:
        js = nc.jetstream()
        try:
            await js.delete_stream(names.samples_stream)
        except Exception:
            pass
    finally:
        await nc.close()
    r = connect_redis(infra["redis_url"])
    try:
        await delete_namespace(r, names)
    finally:
        await r.aclose()


@pytest.fixture
def isolated(infra, names):
    """Infra URLs plus a unique namespace; removes the namespace's stream and keys after."""
    yield {**infra, "names": names, "namespace": names.namespace}
    asyncio.run(_cleanup(infra, names))
