"""Fitting: mean and quantile models learn a synthetic latency relationship; training data
from samples, entries and arrays; model specs and metadata."""

from __future__ import annotations

import numpy as np
import pytest

from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import (
    FitConfig,
    TrainingData,
    fit_models,
    missing_targets,
    refit_gate,
)
from shared.features import FEATURES, TPOT_COLUMNS, TTFT_COLUMNS
from shared.latency_model import LatencyModel, ModelSpec, evaluate, sha256, spec_from_info
from shared.schemas import ModelMeta
from tests.unit.trainer_synth import synthetic_samples, true_tpot, true_ttft


@pytest.fixture(scope="module")
def train() -> TrainingData:
    return TrainingData.from_samples(synthetic_samples(1500, seed=1, noise=0.1))


@pytest.fixture(scope="module")
def test_rows() -> np.ndarray:
    return TrainingData.from_samples(synthetic_samples(400, seed=2, prefix="t")).rows


def test_training_data_from_samples():
    samples = synthetic_samples(5, seed=1)
    d = TrainingData.from_samples(samples)
    assert d.rows.shape == (5, len(FEATURES)) and len(d) == 5
    assert d.labels["ttft"].tolist() == [s.ttft_ms for s in samples]
    assert d.labels["e2e"].tolist() == [s.e2e_ms for s in samples]
    assert d.counts() == {"ttft": 5, "tpot": 5, "e2e": 5}
    arr = TrainingData.from_arrays(d.rows, {"ttft": [1.0, np.nan, 2.0, 3.0, 4.0]})
    assert arr.counts() == {"ttft": 4} and arr.ts.tolist() == [0.0] * 5


def test_mean_models_learn_the_relationship(train, test_rows):
    result = run_cycle(train, None, FitConfig(rounds=200))
    assert result.decision == "promote" and result.reason == "first_model"
    assert result.metrics["ttft"]["mape"] < 0.15 and result.metrics["tpot"]["mape"] < 0.15
    model = result.model("lab")
    pred = model.predict(test_rows)
    y_ttft = np.array([true_ttft(r) for r in test_rows])
    y_tpot = np.array([true_tpot(r) for r in test_rows])
    assert np.mean(np.abs(pred["ttft"] - y_ttft) / y_ttft) < 0.15
    assert np.mean(np.abs(pred["tpot"] - y_tpot) / y_tpot) < 0.15


def test_quantile_models_cover_about_p90(train):
    cfg = FitConfig(objective="both", rounds=150)
    result = run_cycle(train, None, cfg)
    assert set(result.models) == {"ttft", "tpot", "ttft_p90", "tpot_p90"}
    for key in ("ttft_p90", "tpot_p90"):
        m = result.metrics[key]
        assert 0.8 <= m["coverage"] <= 0.97, m
        assert m["pinball"] > 0
    model = result.model("lab")
    assert model.key_for("ttft", "quantile") == "ttft_p90"
    assert model.key_for("ttft", "mean") == "ttft"
    p = model.predict(train.rows[:200])
    assert np.mean(p["ttft_p90"] >= p["ttft"]) > 0.8  # p90 above the mean mostly


def test_e2e_target(train):
    result = run_cycle(train, None, FitConfig(targets=("ttft", "tpot", "e2e"), rounds=50))
    assert set(result.models) == {"ttft", "tpot", "e2e"}
    assert result.models["e2e"].spec.columns == TTFT_COLUMNS
    assert result.metrics["e2e"]["mape"] < 0.3


def test_build_meta_describes_every_model(train):
    cfg = FitConfig(objective="both", rounds=5)
    result = run_cycle(train, None, cfg)
    meta, blobs = build_meta("v7", 99.5, result, cfg, bucket_coverage={"buckets_filled": 3})
    assert set(blobs) == {"ttft", "tpot", "ttft_p90", "tpot_p90"}
    assert meta.targets["tpot"]["columns"] == list(TPOT_COLUMNS)
    assert meta.targets["ttft_p90"] == {
        "sha256": sha256(blobs["ttft_p90"]),
        "columns": list(TTFT_COLUMNS),
        "format": "ubj",
        "target": "ttft",
        "objective": "quantile",
        "quantile_alpha": 0.9,
        "transform": "log",
        "shift": result.models["ttft_p90"].spec.shift,  # calibrated on the newest 405 rows
    }
    assert isinstance(meta.targets["ttft_p90"]["shift"], float)
    assert meta.metrics["ttft"]["holdout"] == 150 and meta.metrics["ttft"]["samples"] == 1350
    assert meta.metrics["ttft_p90"]["samples"] == 1350 - 405
    assert meta.bucket_coverage == {"buckets_filled": 3}
    assert meta.evaluation["decision"] == "promote" and meta.params["rounds"] == 5
    assert meta.trained_until is not None and meta.source == "trainer"
    again = ModelMeta.decode(meta.encode())
    assert again == meta
    loaded = LatencyModel.from_blobs(again, blobs)
    shift = result.models["tpot_p90"].spec.shift
    assert loaded.spec("tpot_p90") == ModelSpec("tpot", "quantile", 0.9, "log", shift=shift)


def test_small_fit_has_no_holdout_metrics():
    data = TrainingData.from_samples(synthetic_samples(10))
    result = run_cycle(data, None, FitConfig(rounds=3))
    assert result.holdout == 0 and result.metrics["ttft"]["mape"] is None
    meta, _ = build_meta("v1", 0.0, result, FitConfig(rounds=3))
    assert b"NaN" not in meta.encode()


def test_fit_is_deterministic(train):
    mask = np.ones(len(train), dtype=bool)
    a = fit_models(train, mask, FitConfig(rounds=5), seed=3)
    b = fit_models(train, mask, FitConfig(rounds=5), seed=3)
    assert a["ttft"].sha256 == b["ttft"].sha256


def test_evaluate_metrics():
    y = np.array([100.0, 200.0, 0.0])
    pred = np.array([110.0, 180.0, 0.5])
    m = evaluate(pred, y, ModelSpec("ttft"))
    assert m["n"] == 3 and m["mae"] == pytest.approx(30.5 / 3)
    assert m["mape"] == pytest.approx((0.1 + 0.1 + 0.5) / 3)  # 0 ms label floored to 1 ms
    q = evaluate(pred, y, ModelSpec("ttft", "quantile", 0.9))
    assert q["coverage"] == pytest.approx(2 / 3)
    assert q["pinball"] == pytest.approx((0.1 * 10 + 0.9 * 20 + 0.1 * 0.5) / 3)
    assert evaluate(np.zeros(0), np.zeros(0), ModelSpec("tpot"))["mape"] is None


@pytest.mark.parametrize(
    ("key", "info", "spec"),
    [
        ("ttft", {}, ModelSpec("ttft")),
        ("tpot_p90", {}, ModelSpec("tpot", "quantile", 0.9)),
        (
            "e2e_p50",
            {"objective": "quantile", "quantile_alpha": 0.5},
            ModelSpec("e2e", "quantile", 0.5),
        ),
        ("ttft", {"transform": "log"}, ModelSpec("ttft", transform="log")),
    ],
)
def test_spec_from_info(key, info, spec):
    assert spec_from_info(key, info) == spec and spec.key == key


@pytest.mark.parametrize(
    ("key", "info"),
    [
        ("latency", {}),
        ("ttft", {"objective": "quantile"}),
        ("ttft_p90", {"quantile_alpha": 0.5}),
        ("ttft", {"transform": "sqrt"}),
    ],
)
def test_inconsistent_specs(key, info):
    with pytest.raises(ValueError):
        spec_from_info(key, info)


@pytest.mark.parametrize(
    ("counts", "minimum", "targets", "missing"),
    [
        ({"ttft": 100, "tpot": 100}, 100, ("ttft", "tpot"), []),
        ({"ttft": 100, "tpot": 99}, 100, ("ttft", "tpot"), ["tpot"]),
        ({"ttft": 100, "tpot": 100}, 100, ("ttft", "tpot", "e2e"), ["e2e"]),
        ({}, 1, ("ttft", "tpot"), ["ttft", "tpot"]),
    ],
)
def test_missing_targets(counts, minimum, targets, missing):
    assert missing_targets(counts, minimum, targets) == missing


def test_config_validation():
    with pytest.raises(ValueError):
        FitConfig(objective="median")
    with pytest.raises(ValueError):
        FitConfig(targets=("latency",))
    with pytest.raises(ValueError):
        FitConfig(objective="quantile", quantile_alpha=1.5)
    assert [s.key for s in FitConfig(objective="quantile", quantile_alpha=0.95).specs()] == [
        "ttft_p95",
        "tpot_p95",
    ]


@pytest.mark.parametrize(
    ("new", "counts", "force", "expected"),
    [
        (5, {"ttft": 500, "tpot": 500}, False, (False, [])),  # too few new samples
        (5, {"ttft": 500, "tpot": 500}, True, (True, [])),  # force ignores the new-sample gate
        (50, {"ttft": 500, "tpot": 10}, False, (False, ["tpot"])),  # a target lacks rows
        (50, {"ttft": 10, "tpot": 10}, True, (False, ["ttft", "tpot"])),  # force never skips min
        (50, {"ttft": 100, "tpot": 100}, False, (True, [])),
    ],
)
def test_refit_gate(new, counts, force, expected):
    got = refit_gate(new, counts, min_new_samples=50, min_samples=100, force=force)
    assert got == expected


def test_log_transform_fits_relative_errors_and_predicts_milliseconds(train):
    """Log models (the default) are judged in ms like raw ones; on labels spanning decades
    they win on MAPE, raw ones on nothing the router uses."""
    raw = run_cycle(train, None, FitConfig(rounds=60, transform="none", point_loss="squared"))
    log = run_cycle(train, None, FitConfig(rounds=60, transform="log", point_loss="squared"))
    assert log.models["ttft"].spec.transform == "log"
    assert raw.models["ttft"].spec.transform == "none"
    for key in ("ttft", "tpot"):
        assert log.metrics[key]["mape"] <= raw.metrics[key]["mape"] * 1.05, key
    p = log.model("x").predict(train.rows[:50])["ttft"]
    assert (p >= 0).all() and p.mean() > 1.0  # milliseconds, not log-milliseconds


def test_transform_is_validated():
    with pytest.raises(ValueError, match="transform"):
        FitConfig(transform="sqrt")
