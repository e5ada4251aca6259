"""Model versions in real Redis: publish, current pointer, retention, checksum refusal."""

from __future__ import annotations

import time

import numpy as np
import pytest

from shared.bus import connect_redis
from shared.features import FEATURE_SCHEMA_VERSION, FEATURES
from shared.latency_model import TARGET_COLUMNS, booster_to_bytes, fit_target, sha256
from shared.model_store import current_version, load_version, next_version, publish_version
from shared.schemas import ModelMeta, SchemaError


def _fit(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 100, size=(200, len(FEATURES)))
    blobs, targets = {}, {}
    for name, cols in TARGET_COLUMNS.items():
        y = 10 + x[:, 2] * 0.5 + (seed if name == "ttft" else 0)
        res = fit_target(x, y, cols, rounds=10)
        blobs[name] = booster_to_bytes(res.booster)
        targets[name] = {"sha256": sha256(blobs[name]), "columns": list(cols), "format": "ubj"}
    return x, blobs, targets


async def test_publish_load_and_retention(isolated):
    names = isolated["names"]
    r = connect_redis(isolated["redis_url"])
    try:
        assert await current_version(r, names) is None
        versions = []
        for seed in range(4):
            x, blobs, targets = _fit(seed)
            v = await next_version(r, names)
            meta = ModelMeta(version=v, created_at=time.time(), samples=200,
                             feature_schema=FEATURE_SCHEMA_VERSION, targets=targets)  # fmt: skip
            await publish_version(r, names, meta, blobs, keep=2)
            versions.append(v)
        assert versions == ["v1", "v2", "v3", "v4"]
        assert await current_version(r, names) == "v4"
        model = await load_version(r, names, "v4")
        pred = model.predict(x[:5])
        assert pred["ttft"].shape == (5,) and pred["tpot"].shape == (5,)
        kept = [v.decode() for v in await r.lrange(names.model_versions, 0, -1)]
        assert kept == ["v4", "v3"]
        assert not await r.exists(names.model_blob("v1"))
        with pytest.raises(SchemaError):
            await load_version(r, names, "v1")
        # a blob whose bytes do not match the checksum is refused
        await r.hset(names.model_blob("v3"), "ttft", b"garbage")
        with pytest.raises(SchemaError) as e:
            await load_version(r, names, "v3")
        assert e.value.reason == "checksum"
    finally:
        await r.aclose()


@pytest.mark.parametrize(
    "targets",
    [
        {},
        {"ttft": "not-a-dict"},
        {"latency": {"sha256": "x", "columns": [0], "format": "ubj"}},
        {"ttft": {"sha256": "x", "columns": [0, 99], "format": "ubj"}},
        {"ttft": {"sha256": "x", "columns": [0], "format": "pickle"}},
        {"ttft": {"sha256": "x"}},
    ],
)
async def test_bad_metadata_is_refused(isolated, targets):
    names = isolated["names"]
    r = connect_redis(isolated["redis_url"])
    try:
        meta = ModelMeta(version="v9", created_at=1.0, samples=1,
                         feature_schema=FEATURE_SCHEMA_VERSION, targets=targets)  # fmt: skip
        await r.hset(names.model_blob("v9"), mapping={"meta": meta.encode(), "ttft": b"x"})
        with pytest.raises(SchemaError) as e:
            await load_version(r, names, "v9")
        assert e.value.reason == "bad_meta"
    finally:
        await r.aclose()
