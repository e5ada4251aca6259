"""A model version trained on synthetic rows with known answers, published to Redis before
a stack starts, so predicted routing is active at once:

    TTFT = 100 ms + 0.1 ms x uncached prompt tokens + 50 ms x waiting requests
    TPOT = 5 ms + 0.004 ms x decode tokens in flight + 1 ms x running requests
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from shared.bus import connect_redis
from shared.features import FEATURE_SCHEMA_VERSION, FEATURES, POD_TYPES, prefix_bucket
from shared.latency_model import ModelSpec, booster_to_bytes, fit_booster, sha256
from shared.model_store import publish_version
from shared.schemas import ModelMeta
from shared.settings import CommonSettings
from shared.subjects import Names

F = {name: i for i, name in enumerate(FEATURES)}


def synthetic_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.zeros((n, len(FEATURES)))
    some = rng.random(n) < 0.6  # many idle-ish rows so small loads are predicted well
    waiting = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 10, n))
    running = np.where(some, rng.integers(0, 20, n), 0)
    decode = np.where(some, rng.uniform(0, 20_000, n), 0.0)
    inp = rng.uniform(1, 20_000, n)
    prefix = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], n)
    x[:, F["is_queued"]] = waiting > 0
    x[:, F["kv_cache_percentage"]] = rng.random(n)
    x[:, F["input_token_length"]] = inp
    x[:, F["num_request_waiting"]] = waiting
    x[:, F["num_request_running"]] = running
    x[:, F["prefill_tokens_in_flight"]] = rng.uniform(0, 20_000, n)
    x[:, F["decode_tokens_in_flight"]] = decode
    x[:, F["prefix_cache_score"]] = prefix
    x[:, F["effective_input_tokens"]] = (1 - prefix) * inp
    x[:, F["prefix_score_bucket"]] = [prefix_bucket(p) for p in prefix]
    x[:, F["pod_type"]] = POD_TYPES["both"]
    ttft = 100 + 0.1 * (1 - prefix) * inp + 50 * waiting
    tpot = 5 + 0.004 * decode + 1.0 * running
    return x, ttft, tpot


async def publish_synthetic_model(redis: str | CommonSettings, names: Names) -> str:
    """Publish the model as ``v1`` in the namespace (``redis``: a URL, or connection
    settings with credentials and TLS)."""
    x, ttft, tpot = synthetic_rows(6000)
    blobs, targets = {}, {}
    for key, y in (("ttft", ttft), ("tpot", tpot)):
        spec = ModelSpec(key)
        blob = booster_to_bytes(await asyncio.to_thread(fit_booster, x, y, spec, rounds=300))
        blobs[key] = blob
        targets[key] = {"sha256": sha256(blob), "columns": list(spec.columns), "format": "ubj"}
    meta = ModelMeta(version="v1", created_at=time.time(), samples=len(x),
                     feature_schema=FEATURE_SCHEMA_VERSION, targets=targets)  # fmt: skip
    r = connect_redis(redis)
    try:
        await publish_version(r, names, meta, blobs)
    finally:
        await r.aclose()
    return meta.version
