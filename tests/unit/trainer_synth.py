"""Synthetic training samples with a known latency relationship (shared by trainer and
predictor tests)."""

from __future__ import annotations

import random

from services.trainer.window import SampleWindow
from shared.features import FEATURES, PodLoad, build_row
from shared.schemas import TrainingSample

EFFECTIVE = FEATURES.index("effective_input_tokens")
WAITING = FEATURES.index("num_request_waiting")
RUNNING = FEATURES.index("num_request_running")
KV = FEATURES.index("kv_cache_percentage")


def true_ttft(row) -> float:
    return 20.0 + 0.1 * row[EFFECTIVE] + 30.0 * row[WAITING]


def true_tpot(row) -> float:
    return 8.0 + 2.0 * row[RUNNING] + 20.0 * row[KV]


def synthetic_sample(
    rng: random.Random,
    i: int,
    *,
    request_id: str | None = None,
    ts: float | None = None,
    noise: float = 0.0,
    ttft_scale: float = 1.0,
) -> TrainingSample:
    """A TrainingSample whose latencies follow true_ttft / true_tpot (times ``1 + noise``
    relative Gaussian noise and ``ttft_scale``)."""
    load = PodLoad(
        waiting=float(rng.randint(0, 5)), running=float(rng.randint(0, 16)), kv_usage=rng.random()
    )
    tokens = rng.randint(10, 4000)
    row = build_row(tokens, rng.choice([0.0, 0.25, 0.5, 0.9]), load)
    ttft = true_ttft(row) * ttft_scale * max(0.05, 1.0 + rng.gauss(0.0, noise))
    tpot = true_tpot(row) * max(0.05, 1.0 + rng.gauss(0.0, noise))
    return TrainingSample(
        request_id=request_id or f"req-{i}",
        pool="default",
        pod=f"pod-{i % 3}",
        model="m",
        features=row,
        e2e_ms=ttft + 31 * tpot,
        input_tokens=tokens,
        output_tokens=32,
        streaming=True,
        ts=float(1_700_000_000 + i) if ts is None else ts,
        ttft_ms=ttft,
        tpot_ms=tpot,
    )


def synthetic_samples(n: int, seed: int = 1, prefix: str = "req-", **kw) -> list[TrainingSample]:
    rng = random.Random(seed)
    return [synthetic_sample(rng, i, request_id=f"{prefix}{i}", **kw) for i in range(n)]


def synthetic_window(n: int, seed: int = 1) -> SampleWindow:
    w = SampleWindow(max_size=n)
    for s in synthetic_samples(n, seed):
        w.add(s)
    return w
