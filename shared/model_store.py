"""Model versions in Redis: immutable blobs + metadata, an atomic current pointer, last K kept.

Keys (see shared/subjects.py): ``{ns}:model:blob:{version}`` is a hash with field ``meta``
(ModelMeta JSON) and one field per model key holding XGBoost UBJ bytes; ``{ns}:model:current``
holds the current version id; ``{ns}:model:versions`` lists kept ids, newest first;
``{ns}:model:history`` lists promotion decisions, rejections and rollbacks (JSON, newest
first, bounded); ``{ns}:trainer:flushed_at`` is the trainer's window flush cutoff.

Also the model file format used by ``headroom model export|import`` (warm start).
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import redis.asyncio as aioredis

from shared.latency_model import LatencyModel
from shared.schemas import ModelMeta, SchemaError
from shared.subjects import Names

HISTORY_KEEP = 200
FILE_FORMAT = "headroom-model"
FILE_VERSION = 1


class VersionExists(ValueError):
    """A version id is already stored: versions are immutable."""


async def next_version(r: aioredis.Redis, names: Names) -> str:
    return f"v{await r.incr(names.model_seq)}"


async def publish_version(
    r: aioredis.Redis,
    names: Names,
    meta: ModelMeta,
    blobs: dict[str, bytes],
    *,
    keep: int = 5,
    activate: bool = True,
) -> None:
    """Store the blobs (never over an existing version), then push the id on the kept list
    and (``activate``) point ``current`` at it in one transaction; drop old versions."""
    key = names.model_blob(meta.version)
    if await r.exists(key):
        raise VersionExists(f"model version {meta.version} already exists")
    mapping: dict[str, bytes] = {"meta": meta.encode(), **blobs}
    await r.hset(key, mapping=mapping)
    async with r.pipeline(transaction=True) as p:
        p.lpush(names.model_versions, meta.version)
        if activate:
            p.set(names.model_current, meta.version)
        p.lrange(names.model_versions, keep, -1)
        p.ltrim(names.model_versions, 0, keep - 1)
        p.get(names.model_current)
        results = await p.execute()
    current = results[-1].decode() if results[-1] else None
    stale = [v.decode() for v in results[-3]]
    stale = [v for v in stale if v != current]  # never delete what is being served
    if stale:
        await r.delete(*[names.model_blob(v) for v in stale])


async def current_version(r: aioredis.Redis, names: Names) -> str | None:
    v = await r.get(names.model_current)
    return v.decode() if v else None


async def kept_versions(r: aioredis.Redis, names: Names) -> list[str]:
    return [v.decode() for v in await r.lrange(names.model_versions, 0, -1)]


async def load_version(r: aioredis.Redis, names: Names, version: str) -> LatencyModel:
    """Fetch and verify one version. Raises SchemaError (checksum, schema, missing)."""
    meta, blobs = await read_version(r, names, version)
    return LatencyModel.from_blobs(meta, blobs)


async def read_version(
    r: aioredis.Redis, names: Names, version: str
) -> tuple[ModelMeta, dict[str, bytes]]:
    """Metadata and raw blobs of one version (not verified). Raises SchemaError."""
    data = await r.hgetall(names.model_blob(version))
    if not data:
        raise SchemaError(f"model {version} not found in Redis", "missing_blob")
    raw = {k.decode(): v for k, v in data.items()}
    if "meta" not in raw:
        raise SchemaError(f"model {version}: no metadata", "missing_meta")
    return ModelMeta.decode(raw.pop("meta")), raw


async def read_meta(r: aioredis.Redis, names: Names, version: str) -> ModelMeta:
    data = await r.hget(names.model_blob(version), "meta")
    if data is None:
        raise SchemaError(f"model {version} not found in Redis", "missing_blob")
    return ModelMeta.decode(data)


async def list_versions(
    r: aioredis.Redis, names: Names
) -> list[tuple[str, ModelMeta | None, str | None]]:
    """Kept versions, newest first: ``(version, meta or None, error or None)``."""
    versions = await kept_versions(r, names)
    out: list[tuple[str, ModelMeta | None, str | None]] = []
    for v in versions:
        try:
            out.append((v, await read_meta(r, names, v), None))
        except SchemaError as e:
            out.append((v, None, f"{e.reason}: {e}"))
    return out


async def set_current(r: aioredis.Redis, names: Names, version: str) -> str | None:
    """Point ``current`` at an existing version after verifying it loads (checksums and
    schema); returns the previous current version. Raises SchemaError if it does not."""
    await load_version(r, names, version)
    async with r.pipeline(transaction=True) as p:
        p.get(names.model_current)
        p.set(names.model_current, version)
        previous, _ = await p.execute()
    return previous.decode() if previous else None


async def append_history(
    r: aioredis.Redis, names: Names, record: dict[str, Any], *, keep: int = HISTORY_KEEP
) -> None:
    async with r.pipeline(transaction=True) as p:
        p.lpush(names.model_history, orjson.dumps(record))
        p.ltrim(names.model_history, 0, keep - 1)
        await p.execute()


async def read_history(r: aioredis.Redis, names: Names, n: int = 20) -> list[dict[str, Any]]:
    out = []
    for raw in await r.lrange(names.model_history, 0, max(n, 1) - 1):
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
    return out


async def delete_namespace(r: aioredis.Redis, names: Names) -> int:
    """Remove every key of this namespace (tests and `headroom` cleanup)."""
    n = 0
    async for key in r.scan_iter(match=f"{names.redis_prefix}*", count=500):
        n += await r.delete(key)
    return n


# --------------------------------------------------------------------------------------
# Model files (export / import / warm start)
# --------------------------------------------------------------------------------------
def encode_model_file(meta: ModelMeta, blobs: dict[str, bytes]) -> bytes:
    """One JSON document: the metadata and every UBJ blob (base64). Never pickle."""
    doc = {
        "format": FILE_FORMAT,
        "v": FILE_VERSION,
        "meta": meta.to_dict(),
        "blobs": {k: base64.b64encode(v).decode() for k, v in blobs.items()},
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


def decode_model_file(data: bytes) -> tuple[ModelMeta, dict[str, bytes]]:
    """Parse and verify a model file (checksums, feature schema). Raises SchemaError."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise SchemaError(f"model file is not JSON: {e}", "not_json") from e
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise SchemaError("not a headroom model file", "bad_format")
    if doc.get("v") != FILE_VERSION:
        raise SchemaError(f"unsupported model file version {doc.get('v')!r}", "schema_version")
    meta = ModelMeta.from_dict(doc.get("meta"))
    raw = doc.get("blobs")
    if not isinstance(raw, dict):
        raise SchemaError("model file: blobs must be an object", "bad_format")
    try:
        blobs = {str(k): base64.b64decode(v, validate=True) for k, v in raw.items()}
    except (TypeError, ValueError) as e:
        raise SchemaError(f"model file: bad blob encoding: {e}", "bad_format") from e
    LatencyModel.from_blobs(meta, blobs)  # checksums, schema, loadable
    return meta, blobs


def imported_meta(meta: ModelMeta, version: str, created_at: float, origin: str) -> ModelMeta:
    """The metadata an imported model is stored under: a new version id of this deployment,
    ``source = "import"``, the original id and origin recorded, no ``trained_until`` (its
    samples are not this deployment's, so every local sample counts as unseen by it)."""
    params = {
        **meta.params,
        "imported_from": {"version": meta.version, "created_at": meta.created_at, "origin": origin},
    }
    d = {
        **meta.to_dict(),
        "version": version,
        "created_at": created_at,
        "source": "import",
        "trained_until": None,
        "params": params,
    }
    return ModelMeta.from_dict(d)


async def import_model_file(
    r: aioredis.Redis,
    names: Names,
    data: bytes,
    *,
    origin: str,
    now: float,
    keep: int = 5,
    activate: bool = True,
) -> ModelMeta:
    """Verify a model file and store it as a new version of this deployment (warm start).
    Raises SchemaError if the file is not a valid model."""
    meta, blobs = decode_model_file(data)
    version = await next_version(r, names)
    new = imported_meta(meta, version, now, origin)
    await publish_version(r, names, new, blobs, keep=keep, activate=activate)
    record = {"ts": now, "action": "import", "version": version, "from": meta.version}
    await append_history(r, names, {**record, "origin": origin, "activated": activate})
    return new
