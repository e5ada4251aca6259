"""Feature schema 3: the pod's hardware class as a model input (issue 15, "the models take
the class as a feature"). The gateway writes the class code into the row it predicts on and
publishes; a v3 model learns what differs by class, v1/v2 models (schema 1/2) still serve on
schema-3 rows and cannot see the class."""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import build_candidate_rows
from services.predictor.core import check_servable
from services.predictor.inference import CompiledModel
from services.trainer.cycle import PROMOTE, build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from services.trainer.window import SampleWindow
from shared.features import FEATURES, PodLoad, RowContext, build_row, hardware_class_code
from shared.latency_model import LatencyModel
from shared.schemas import PodRecord, PodSnapshot, TrainingSample

HW = FEATURES.index("hardware_class")
A100, H100 = "nvidia-a100-80gb", "nvidia-h100-80gb"


def test_candidate_rows_carry_each_pods_hardware_class():
    view = PodView(stale_after_s=2.0)
    classes = [H100, A100, None]
    recs = [
        PodRecord(name=f"pod-{i}", url=f"u{i}", ready=True, scraped_at=10.0, models=["m"],
                  waiting=1.0, running=2.0, kv_usage=0.2, hardware_class=hw)
        for i, hw in enumerate(classes)
    ]  # fmt: skip
    view.apply_snapshot(PodSnapshot(pool="p", ts=10.0, pods=recs))
    cands = view.candidates("m", 10.0)
    rows = build_candidate_rows(cands, 100, [1, 2, 3], PrefixIndex(16, 1000))
    got = {c.name: r[HW] for c, r in zip(rows.candidates, rows.rows, strict=True)}
    assert got == {"pod-0": hardware_class_code(H100), "pod-1": hardware_class_code(A100),
                   "pod-2": 0.0}  # fmt: skip
    assert got["pod-0"] != got["pod-1"]


def _samples(n: int, seed: int = 3) -> list[TrainingSample]:
    """Two classes that differ only in decode speed (the A100 decodes 2x slower): nothing in
    the v1/v2 columns tells them apart."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        hw = A100 if rng.random() < 0.5 else H100
        running = float(rng.randint(0, 16))
        load = PodLoad(waiting=0.0, running=running, kv_usage=rng.random() * 0.5)
        tokens = rng.randint(50, 3000)
        row = build_row(tokens, 0.0, load, RowContext(max_tokens=256, hardware_class=hw))
        tpot = (10.0 + 1.5 * running) * (2.0 if hw == A100 else 1.0)
        ttft = 20.0 + 0.05 * tokens
        out.append(TrainingSample(
            request_id=f"r{i}", pool="p", pod=f"pod-{i % 4}", model="m", features=row,
            e2e_ms=ttft + 100 * tpot, input_tokens=tokens, output_tokens=101, streaming=True,
            ts=1.7e9 + i, ttft_ms=ttft, tpot_ms=tpot,
        ))  # fmt: skip
    return out


def _fit_blobs(samples: list[TrainingSample], features: str):
    w = SampleWindow(max_size=len(samples))
    for s in samples:
        w.add(s)
    config = FitConfig(rounds=60, features=features, min_samples=50)
    result = run_cycle(TrainingData.from_entries(w.snapshot()), None, config, seed=0)
    assert result.decision == PROMOTE
    return build_meta("v1", 1.0, result, config)


def _fit(samples: list[TrainingSample], features: str) -> LatencyModel:
    return LatencyModel.from_blobs(*_fit_blobs(samples, features))


def _tpot_mape(model: LatencyModel, samples: list[TrainingSample]) -> float:
    rows = np.asarray([s.features for s in samples], dtype=np.float32)
    _, tpot = CompiledModel(model, "mean").predict(rows)
    truth = np.asarray([s.tpot_ms for s in samples])
    return float(np.mean(np.abs(tpot - truth) / truth))


def test_a_v3_model_learns_the_class_a_v2_model_cannot_see():
    train, test = _samples(1500, seed=3), _samples(400, seed=4)
    v2, v3 = _fit(train, "v2"), _fit(train, "v3")
    m2, m3 = _tpot_mape(v2, test), _tpot_mape(v3, test)
    assert m3 < 0.05 < 0.2 < m2  # v2 averages the two speeds (~1/3 off), v3 separates them


def test_older_schema_models_are_served_on_schema_3_rows_and_ignore_the_class():
    train = _samples(600)
    meta, blobs = _fit_blobs(train, "v2")
    assert all(len(t["columns"]) == 18 for t in meta.targets.values())
    old = LatencyModel.from_blobs(dataclasses.replace(meta, feature_schema=2), blobs)
    check_servable(old, "mean")  # a stored schema-2 model still loads
    rows = np.asarray([s.features for s in train[:50]], dtype=np.float32)
    flipped = rows.copy()
    flipped[:, HW] = np.where(flipped[:, HW] == hardware_class_code(A100),
                              hardware_class_code(H100), hardware_class_code(A100))  # fmt: skip
    compiled = CompiledModel(old, "mean")
    for a, b in zip(compiled.predict(rows), compiled.predict(flipped), strict=True):
        assert np.array_equal(a, b)  # it reads columns 0-17 only
    v3 = CompiledModel(_fit(train, "v3"), "mean")
    assert not np.array_equal(v3.predict(rows)[1], v3.predict(flipped)[1])
