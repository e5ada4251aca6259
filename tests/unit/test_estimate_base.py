"""TTFT models that correct the analytic estimate (``ttft_base=estimate``): the estimate is
the booster's base margin, the trees fit the log ratio; predictions follow the estimate
beyond the latencies the model was fitted on, every serving path adds the margin alike, and
a version's metadata says so."""

from __future__ import annotations

import numpy as np
import pytest

from services.predictor.inference import CompiledModel
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from services.trainer.settings import TrainerSettings
from shared.features import ESTIMATE_COLUMN, FEATURES
from shared.latency_model import LatencyModel, ModelSpec, spec_from_info

N = len(FEATURES)
QUEUED = FEATURES.index("num_request_waiting")


def rows_with_estimates(estimates: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, (len(estimates), N))
    x[:, QUEUED] = rng.integers(0, 2, len(estimates))
    x[:, ESTIMATE_COLUMN] = estimates
    return x


def ttft_of(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """TTFT 1.6x the estimate on queued pods, 1.1x otherwise, 5% noise."""
    factor = np.where(x[:, QUEUED] > 0, 1.6, 1.1)
    return x[:, ESTIMATE_COLUMN] * factor * rng.lognormal(0.0, 0.05, len(x))


def data(estimates: np.ndarray, seed: int) -> TrainingData:
    x = rows_with_estimates(estimates, seed)
    rng = np.random.default_rng(seed + 100)
    return TrainingData.from_arrays(x, {"ttft": ttft_of(x, rng), "tpot": np.full(len(x), 10.0)})


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


@pytest.mark.parametrize("objective", ["mean", "both"])
def test_a_corrected_estimate_extrapolates_where_trees_alone_cannot(objective):
    train = data(np.random.default_rng(0).uniform(50, 500, 1500), seed=1)
    far = data(np.random.default_rng(2).uniform(2_000, 20_000, 400), seed=3)  # never seen
    y = far.labels["ttft"]
    common = {"rounds": 80, "features": "v2", "objective": objective}
    plain = run_cycle(train, None, FitConfig(**common)).model("plain")
    based = run_cycle(train, None, FitConfig(**common, ttft_base="estimate")).model("based")
    assert based.spec("ttft").base == "estimate" and plain.spec("ttft").base is None
    assert based.spec("tpot").base is None  # TPOT has no analytic estimate
    assert mape(plain.predict_key("ttft", far.rows), y) > 0.7  # stuck below ~800 ms
    assert mape(based.predict_key("ttft", far.rows), y) < 0.1
    if objective == "both":  # the quantile model is a corrected estimate too
        p90 = based.predict_key("ttft_p90", far.rows)
        assert 0.75 <= float(np.mean(y <= p90)) <= 1.0


def test_every_serving_path_adds_the_margin_alike():
    train = data(np.random.default_rng(0).uniform(50, 5000, 600), seed=5)
    cfg = FitConfig(rounds=30, features="v2", ttft_base="estimate")
    meta, blobs = build_meta("v1", 1.0, run_cycle(train, None, cfg), cfg)
    assert meta.targets["ttft"]["base"] == "estimate" and "base" not in meta.targets["tpot"]
    assert meta.params["ttft_base"] == "estimate"
    model = LatencyModel.from_blobs(meta, blobs)
    assert model.spec("ttft").base == "estimate"
    compiled = CompiledModel(model)
    assert compiled.direct and compiled.forest is not None
    x = data(np.random.default_rng(7).uniform(10, 50_000, 300), seed=8).rows
    for n in (3, compiled.forest_rows, 300):  # the forest, then XGBoost's C API
        want = model.predict_key("ttft", x[:n]), model.predict_key("tpot", x[:n])
        for rows in (x[:n], x[:n].astype(np.float32)):  # the JSON and the binary wire
            ttft, tpot = compiled.predict(rows)
            assert np.array_equal(ttft, want[0]) and np.array_equal(tpot, want[1])
    # the margin matters: the same trees without it predict something else entirely
    no_margin = LatencyModel.from_boosters("x", model.boosters, {"ttft": ModelSpec(
        "ttft", transform="log", features="v2", loss="relative", level=model.spec("ttft").level
    ), "tpot": model.spec("tpot")})  # fmt: skip
    assert mape(no_margin.predict_key("ttft", x), model.predict_key("ttft", x)) > 0.5


def test_the_base_is_part_of_the_spec():
    spec = ModelSpec("ttft", transform="log", features="v2", base="estimate")
    assert spec.describe()["base"] == "estimate"
    assert spec_from_info("ttft", spec.describe()) == spec
    assert spec.params()["base_score"] == 0.0
    assert "base" not in ModelSpec("ttft", transform="log").describe()
    with pytest.raises(ValueError, match="base"):
        ModelSpec("tpot", transform="log", base="estimate")
    with pytest.raises(ValueError, match="base"):
        ModelSpec("ttft", base="estimate")  # raw milliseconds: no log ratio
    with pytest.raises(ValueError, match="base"):
        ModelSpec("ttft", transform="log", base="cost")
    with pytest.raises(ValueError, match="base"):
        spec_from_info("ttft", {"transform": "log", "base": 3})


def test_the_trainer_setting_configures_the_fit(monkeypatch):
    monkeypatch.setenv("HEADROOM_TRAINER_TTFT_BASE", "estimate")
    assert TrainerSettings().fit_config().ttft_base == "estimate"
    monkeypatch.setenv("HEADROOM_TRAINER_TTFT_BASE", "none")
    assert TrainerSettings().fit_config().ttft_base is None
    with pytest.raises(ValueError, match="ttft_base"):
        FitConfig(features="v1", ttft_base="estimate")  # llm-d's eleven lack the estimate
    with pytest.raises(ValueError, match="ttft_base"):
        FitConfig(transform="none", point_loss="squared", ttft_base="estimate")
