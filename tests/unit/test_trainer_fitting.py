"""Fitting learns a synthetic latency relationship; versions are described correctly."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from services.trainer.fitting import build_meta, fit_targets, missing_targets
from services.trainer.window import SampleWindow
from shared.features import FEATURES, TPOT_COLUMNS, TTFT_COLUMNS, PodLoad, build_row
from shared.latency_model import LatencyModel, sha256
from shared.schemas import ModelMeta, TrainingSample

EFFECTIVE = FEATURES.index("effective_input_tokens")
WAITING = FEATURES.index("num_request_waiting")
RUNNING = FEATURES.index("num_request_running")
KV = FEATURES.index("kv_cache_percentage")


def true_ttft(row: list[float]) -> float:
    return 20.0 + 0.1 * row[EFFECTIVE] + 30.0 * row[WAITING]


def true_tpot(row: list[float]) -> float:
    return 8.0 + 2.0 * row[RUNNING] + 20.0 * row[KV]


def synthetic_sample(rng: random.Random, i: int, *, request_id: str | None = None):
    """A TrainingSample whose latencies follow true_ttft / true_tpot (no noise)."""
    load = PodLoad(
        waiting=float(rng.randint(0, 5)),
        running=float(rng.randint(0, 16)),
        kv_usage=rng.random(),
    )
    tokens = rng.randint(10, 4000)
    row = build_row(tokens, rng.choice([0.0, 0.25, 0.5, 0.9]), load)
    return TrainingSample(
        request_id=request_id or f"req-{i}",
        pool="default",
        pod=f"pod-{i % 3}",
        model="m",
        features=row,
        e2e_ms=1000.0,
        input_tokens=tokens,
        output_tokens=32,
        streaming=True,
        ts=float(i),
        ttft_ms=true_ttft(row),
        tpot_ms=true_tpot(row),
    )


def synthetic_window(n: int, seed: int = 1) -> SampleWindow:
    rng = random.Random(seed)
    w = SampleWindow(max_size=n)
    for i in range(n):
        w.add(synthetic_sample(rng, i))
    return w


def test_fit_learns_synthetic_relationship():
    train = synthetic_window(1500, seed=1)
    fitted = fit_targets(train.target_arrays(), rounds=200)
    assert fitted["ttft"].mape is not None and fitted["ttft"].mape < 0.15
    assert fitted["tpot"].mape is not None and fitted["tpot"].mape < 0.15

    meta, blobs = build_meta("v1", 123.0, len(train), fitted)
    model = LatencyModel.from_blobs(meta, blobs)
    test = synthetic_window(300, seed=2)
    rows = test.rows()
    pred = model.predict(rows)
    y_ttft = np.array([true_ttft(list(r)) for r in rows])
    y_tpot = np.array([true_tpot(list(r)) for r in rows])
    assert np.mean(np.abs(pred["ttft"] - y_ttft) / y_ttft) < 0.15
    assert np.mean(np.abs(pred["tpot"] - y_tpot) / y_tpot) < 0.15


def test_build_meta_describes_every_target():
    w = synthetic_window(60)
    fitted = fit_targets(w.target_arrays(), rounds=5)
    meta, blobs = build_meta("v7", 99.5, len(w), fitted)
    assert set(blobs) == {"ttft", "tpot"}
    assert meta.targets["ttft"]["columns"] == list(TTFT_COLUMNS)
    assert meta.targets["tpot"]["columns"] == list(TPOT_COLUMNS)
    for name, blob in blobs.items():
        assert meta.targets[name] == {
            "sha256": sha256(blob),
            "columns": meta.targets[name]["columns"],
            "format": "ubj",
        }
        m = meta.metrics[name]
        assert m["holdout"] == 6 and m["samples"] == 60
        assert math.isfinite(m["mape"]) and math.isfinite(m["mae"])
    again = ModelMeta.decode(meta.encode())
    assert again == meta


def test_small_fit_has_no_holdout_metrics():
    w = synthetic_window(10)
    fitted = fit_targets(w.target_arrays(), rounds=3)
    assert fitted["ttft"].holdout == 0
    assert fitted["ttft"].mape is None and fitted["ttft"].mae is None
    meta, _ = build_meta("v1", 0.0, 10, fitted)
    assert b"NaN" not in meta.encode()


def test_fit_is_deterministic():
    arrays = synthetic_window(80).target_arrays()
    a = fit_targets(arrays, rounds=5, seed=3)
    b = fit_targets(arrays, rounds=5, seed=3)
    assert a["ttft"].sha256 == b["ttft"].sha256


@pytest.mark.parametrize(
    ("counts", "minimum", "missing"),
    [
        ({"ttft": 100, "tpot": 100}, 100, []),
        ({"ttft": 100, "tpot": 99}, 100, ["tpot"]),
        ({"ttft": 5, "tpot": 200}, 100, ["ttft"]),
        ({}, 1, ["ttft", "tpot"]),
    ],
)
def test_missing_targets(counts, minimum, missing):
    assert missing_targets(counts, minimum) == missing
