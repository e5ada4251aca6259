"""Split-conformal calibration of the quantile models (``quantile_calibration``): the newest
share of a fit's rows calibrates trees fitted on the rest with a constant shift of their
output, so the p90 model covers ~90% of what comes after its window; every serving path adds
the shift alike and a version's metadata carries it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.lab.config import LabConfig
from bench.lab.run import trainer_settings
from services.predictor.inference import CompiledModel
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import (
    DEFAULT_QUANTILE_CALIBRATION,
    MIN_CALIBRATION_ROWS,
    FitConfig,
    TrainingData,
    fit_models,
    fit_quantile_model,
)
from services.trainer.settings import TrainerSettings
from shared.features import FEATURES
from shared.latency_model import (
    LatencyModel,
    ModelSpec,
    conformal_shift,
    fit_booster,
    predict_booster,
    spec_from_info,
)

N = len(FEATURES)


def workload(n: int, *, climb: float, seed: int) -> TrainingData:
    """Lognormal latencies (sigma 0.5) growing with feature 0 and, by ``climb``, over time."""
    rng = np.random.default_rng(seed)
    rows = rng.uniform(0, 10, (n, N))
    ts = np.arange(n, dtype=np.float64)
    scale = (50.0 + 20.0 * rows[:, 0]) * (1.0 + climb * ts / n)
    y = scale * rng.lognormal(0.0, 0.5, n)
    return TrainingData.from_arrays(rows, {"ttft": y, "tpot": y / 10.0}, ts)


def future_coverage(data: TrainingData, fitted: int, calibration: float) -> dict[str, float]:
    """p90 coverage on the rows after the first ``fitted`` of a model fitted on those."""
    cfg = FitConfig(
        objective="quantile", features="v2", rounds=60, quantile_calibration=calibration
    )
    train = np.arange(len(data)) < fitted
    models = fit_models(data, train, cfg)
    later = data.rows[~train]
    return {
        m.spec.target: float(np.mean(data.labels[m.spec.target][~train] <= m.predict(later)))
        for m in models.values()
    }


def test_the_shift_is_the_finite_sample_quantile_of_the_scores():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, (400, N))
    spec = ModelSpec("ttft", "quantile", 0.9, "log", "v2")
    booster = fit_booster(x[:300], rng.lognormal(4, 0.3, 300), spec, rounds=10)
    y = rng.lognormal(4, 0.6, 99)  # wider than the trees learned: they under-cover
    shift = conformal_shift(booster, x[300:399], y, spec)
    raw = np.log1p(predict_booster(booster, x[300:399], spec))
    scores = np.log1p(y) - raw
    # ceil((99 + 1) x 0.9) = 90: exactly 90 of the 99 scores are at or below the shift
    assert int(np.sum(scores <= shift + 1e-9)) == 90 and shift > 0
    calibrated = predict_booster(
        booster, x[300:399], ModelSpec(**{**spec_kwargs(spec), "shift": shift})
    )
    assert float(np.mean(y <= calibrated * (1 + 1e-9))) == pytest.approx(90 / 99)
    # (5 + 1) x 0.9 = 5.4: beyond five rows, so the largest score
    few = conformal_shift(booster, x[300:305], y[:5], spec)
    assert few == pytest.approx(float(np.max(scores[:5])), abs=1e-6)
    with pytest.raises(ValueError, match="quantile"):
        conformal_shift(booster, x[:5], y[:5], ModelSpec("ttft", transform="log"))
    with pytest.raises(ValueError, match="rows"):
        conformal_shift(booster, x[:0], y[:0], spec)


def spec_kwargs(spec: ModelSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def test_calibration_restores_coverage_after_a_climbing_window():
    data = workload(3000, climb=1.0, seed=1)
    plain = future_coverage(data, 2500, 0.0)
    calibrated = future_coverage(data, 2500, 0.2)
    for target in ("ttft", "tpot"):
        assert plain[target] < 0.8  # the trees trail the climb
        assert calibrated[target] >= plain[target] + 0.1
        assert 0.8 <= calibrated[target] <= 0.97


def test_calibration_keeps_coverage_on_stationary_traffic():
    cov = future_coverage(workload(4000, climb=0.0, seed=2), 2000, 0.2)
    for target in ("ttft", "tpot"):
        assert 0.85 <= cov[target] <= 0.95


def test_the_newest_rows_calibrate_and_too_few_do_not():
    data = workload(1000, climb=0.0, seed=3)
    spec = ModelSpec("ttft", "quantile", 0.9, "log", "v2")
    y = data.labels["ttft"]
    cfg = FitConfig(objective="quantile", features="v2", rounds=20, quantile_calibration=0.2)
    ts = data.ts[::-1].copy()  # newest first: the calibration rows are the first 200
    got, booster, n_fit = fit_quantile_model(data.rows, y, ts, spec, cfg)
    assert n_fit == 800 and got.shift is not None
    assert got.shift == conformal_shift(booster, data.rows[:200], y[:200], spec)
    small = int(MIN_CALIBRATION_ROWS / 0.2) - 1  # one row short of enough calibration rows
    got, _, n_fit = fit_quantile_model(data.rows[:small], y[:small], ts[:small], spec, cfg)
    assert got.shift is None and n_fit == small
    off = FitConfig(objective="quantile", features="v2", rounds=20, quantile_calibration=0.0)
    got, _, n_fit = fit_quantile_model(data.rows, y, ts, spec, off)
    assert got.shift is None and n_fit == 1000
    # the mean models are not calibrated, and report the rows they trained on
    both = FitConfig(objective="both", features="v2", rounds=20, quantile_calibration=0.2)
    models = fit_models(data, np.ones(len(data), dtype=bool), both)
    assert models["ttft"].spec.shift is None and models["ttft"].samples == 1000
    assert models["ttft_p90"].spec.shift is not None and models["ttft_p90"].samples == 800


def test_every_serving_path_adds_the_shift_alike():
    data = workload(1500, climb=1.0, seed=4)
    cfg = FitConfig(objective="quantile", features="v2", rounds=30)
    meta, blobs = build_meta("v1", 1.0, run_cycle(data, None, cfg), cfg)
    assert meta.params["quantile_calibration"] == DEFAULT_QUANTILE_CALIBRATION
    shift = meta.targets["ttft_p90"]["shift"]
    assert isinstance(shift, float) and shift > 0
    model = LatencyModel.from_blobs(meta, blobs)
    assert model.spec("ttft_p90").shift == shift
    compiled = CompiledModel(model, prefer="quantile")
    assert compiled.keys == ("ttft_p90", "tpot_p90")
    assert compiled.direct and compiled.forest is not None
    x = workload(300, climb=0.0, seed=5).rows
    for n in (3, compiled.forest_rows, 300):  # the forest, then XGBoost's C API
        want = model.predict_key("ttft_p90", x[:n]), model.predict_key("tpot_p90", x[:n])
        for rows in (x[:n], x[:n].astype(np.float32)):  # the JSON and the binary wire
            ttft, tpot = compiled.predict(rows)
            assert np.array_equal(ttft, want[0]) and np.array_equal(tpot, want[1])
    # the shift matters: it scales 1 + ms by exp(shift)
    plain_spec = ModelSpec(**{**spec_kwargs(model.spec("ttft_p90")), "shift": None})
    plain = predict_booster(model.boosters["ttft_p90"], x, plain_spec)
    got = model.predict_key("ttft_p90", x)
    assert np.allclose((1 + got) / (1 + plain), math.exp(shift), rtol=1e-5)


def test_the_shift_is_part_of_the_spec():
    spec = ModelSpec("ttft", "quantile", 0.9, "log", "v2", shift=0.25)
    assert spec.describe()["shift"] == 0.25
    assert spec_from_info("ttft_p90", spec.describe()) == spec
    assert "shift" not in ModelSpec("ttft", "quantile", 0.9, "log").describe()
    assert spec_from_info("ttft_p90", {"transform": "log"}).shift is None  # older versions
    with pytest.raises(ValueError, match="shift"):
        ModelSpec("ttft", transform="log", shift=0.1)  # a mean model
    with pytest.raises(ValueError, match="shift"):
        ModelSpec("ttft", "quantile", shift=float("nan"))
    with pytest.raises(ValueError, match="shift"):
        spec_from_info("ttft_p90", {"shift": "0.1"})
    with pytest.raises(ValueError, match="shift"):
        spec_from_info("ttft_p90", {"shift": True})


def test_the_settings_configure_it_and_llm_d_stays_uncalibrated(monkeypatch):
    assert TrainerSettings().fit_config().quantile_calibration == DEFAULT_QUANTILE_CALIBRATION
    monkeypatch.setenv("HEADROOM_TRAINER_QUANTILE_CALIBRATION", "0")
    assert TrainerSettings().fit_config().quantile_calibration == 0.0
    monkeypatch.delenv("HEADROOM_TRAINER_QUANTILE_CALIBRATION")
    with pytest.raises(ValueError, match="quantile_calibration"):
        FitConfig(quantile_calibration=1.0)
    # the lab's llm-d baseline fits quantile trees as llm-d does: uncalibrated
    assert trainer_settings(LabConfig("t.jsonl", policy="llmd-predicted")).quantile_calibration == 0
    assert (
        trainer_settings(LabConfig("t.jsonl", policy="headroom-learned")).quantile_calibration
        == DEFAULT_QUANTILE_CALIBRATION
    )
