"""Model versions in Redis: immutable blobs + metadata, an atomic current pointer, last K kept.

Keys (see shared/subjects.py): ``{ns}:model:blob:{version}`` is a hash with field ``meta``
(ModelMeta JSON) and one field per target holding XGBoost UBJ bytes; ``{ns}:model:current``
holds the current version id; ``{ns}:model:versions`` lists kept ids, newest first.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.latency_model import LatencyModel
from shared.schemas import ModelMeta, SchemaError
from shared.subjects import Names


async def next_version(r: aioredis.Redis, names: Names) -> str:
    return f"v{await r.incr(names.model_seq)}"


async def publish_version(
    r: aioredis.Redis, names: Names, meta: ModelMeta, blobs: dict[str, bytes], *, keep: int = 5
) -> None:
    """Store the blobs, then point ``current`` at them in one transaction; drop old versions."""
    mapping: dict[str, bytes] = {"meta": meta.encode(), **blobs}
    await r.hset(names.model_blob(meta.version), mapping=mapping)
    async with r.pipeline(transaction=True) as p:
        p.lpush(names.model_versions, meta.version)
        p.set(names.model_current, meta.version)
        p.lrange(names.model_versions, keep, -1)
        p.ltrim(names.model_versions, 0, keep - 1)
        results = await p.execute()
    stale = [v.decode() for v in results[2]]
    if stale:
        await r.delete(*[names.model_blob(v) for v in stale])


async def current_version(r: aioredis.Redis, names: Names) -> str | None:
    v = await r.get(names.model_current)
    return v.decode() if v else None


async def load_version(r: aioredis.Redis, names: Names, version: str) -> LatencyModel:
    """Fetch and verify one version. Raises SchemaError (checksum, schema, missing)."""
    data = await r.hgetall(names.model_blob(version))
    if not data:
        raise SchemaError(f"model {version} not found in Redis", "missing_blob")
    raw = {k.decode(): v for k, v in data.items()}
    if "meta" not in raw:
        raise SchemaError(f"model {version}: no metadata", "missing_meta")
    meta = ModelMeta.decode(raw.pop("meta"))
    return LatencyModel.from_blobs(meta, raw)


async def delete_namespace(r: aioredis.Redis, names: Names) -> int:
    """Remove every key of this namespace (tests and `headroom` cleanup)."""
    n = 0
    async for key in r.scan_iter(match=f"{names.redis_prefix}*", count=500):
        n += await r.delete(key)
    return n
