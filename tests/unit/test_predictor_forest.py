"""HeapForest gives exactly XGBoost's predictions (every shape of tree it accepts, values on
and beside every split), refuses what it cannot represent, and CompiledModel uses it for
small batches only after checking it against XGBoost."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from services.predictor.forest import ForestError, HeapForest
from services.predictor.inference import CompiledModel, _probe_rows, forest_rows
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared.features import FEATURES
from shared.latency_model import LatencyModel
from tests.unit.trainer_synth import synthetic_window

N = len(FEATURES)
LOSS = {"log": "relative", "none": "squared"}  # the relative loss needs the log transform


def fit(params: dict, rounds: int, cols: int = 5, seed: int = 0, n: int = 600) -> xgb.Booster:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 100, (n, cols)).astype(np.float32)
    x[:, 0] = np.round(x[:, 0])  # repeated values: splits land exactly on data points
    y = 3 * x[:, 0] + np.sin(x[:, 1]) * 20 + rng.normal(0, 1, n) + (x[:, 2] > 50) * 40
    base = {"nthread": 1, "seed": seed, "tree_method": "hist"}
    return xgb.train({**base, **params}, xgb.DMatrix(x, label=y), rounds)


def xgb_predict(b: xgb.Booster, rows: np.ndarray, cols) -> np.ndarray:
    return b.inplace_predict(np.ascontiguousarray(rows[:, list(cols)]), validate_features=False)


def edge_rows(forest: HeapForest, width: int, n: int = 200, seed: int = 1) -> np.ndarray:
    """Rows whose values sit on, just below and just above the forest's split points."""
    rng = np.random.default_rng(seed)
    feat, thr = forest.split_points()
    x = rng.uniform(0, 100, (3 * n, width)).astype(np.float32)
    for c in np.unique(feat):
        v = rng.choice(thr[feat == c], 3 * n)
        x[:, c] = np.concatenate(
            [v[:n], np.nextafter(v[n : 2 * n], -np.inf), np.nextafter(v[2 * n :], np.inf)]
        )
    return x


@pytest.mark.parametrize(
    "params,rounds",
    [
        ({"max_depth": 6}, 200),  # llm-d's default shape
        ({"max_depth": 1}, 1),
        ({"max_depth": 3, "eta": 0.3}, 40),
        ({"max_depth": 8, "min_child_weight": 30}, 20),  # uneven trees: leaves above depth 8
        ({"max_depth": 4, "gamma": 1e6}, 5),  # pruned to a single leaf per tree
        ({"max_depth": 5, "objective": "reg:absoluteerror"}, 30),
        ({"max_depth": 5, "objective": "reg:quantileerror", "quantile_alpha": 0.9}, 30),
        ({"max_depth": 4, "base_score": 1234.5}, 10),
    ],
)
def test_forest_is_bit_identical_to_xgboost(params, rounds):
    b = fit(params, rounds)
    cols = (4, 0, 3, 1, 2)  # the booster sees a permutation of the full row's columns
    forest = HeapForest([(b, cols)])
    for x in (np.random.default_rng(2).uniform(-10, 110, (257, 5)), edge_rows(forest, 5)):
        x = x.astype(np.float32)
        for rows in (x, x[:1], x[:7]):
            (got,) = forest.predict(rows)
            assert got.dtype == np.float32
            assert np.array_equal(got, xgb_predict(b, rows, cols))


def test_two_models_of_different_depths_in_one_forest():
    deep, shallow = fit({"max_depth": 6}, 50, seed=1), fit({"max_depth": 2}, 80, seed=2)
    cols_a, cols_b = (0, 1, 2, 3, 4), (4, 3, 2, 1, 0)
    forest = HeapForest([(deep, cols_a), (shallow, cols_b)])
    assert forest.depth == 6 and forest.n_trees == 130
    x = np.concatenate([edge_rows(forest, 5), np.zeros((1, 5), np.float32)])
    a, b = forest.predict(x)
    assert np.array_equal(a, xgb_predict(deep, x, cols_a))
    assert np.array_equal(b, xgb_predict(shallow, x, cols_b))


@pytest.mark.parametrize(
    "params,match",
    [
        ({"objective": "binary:logistic"}, "link function"),
        ({"booster": "dart", "rate_drop": 0.1}, "gbtree"),
        ({"max_depth": 12}, "depth"),
    ],
)
def test_forest_refuses_what_it_cannot_represent(params, match):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (3000, 5))
    y = (x[:, 0] > 0.5).astype(float) if "binary" in str(params) else x @ [1, 2, 3, 4, 5]
    b = xgb.train({"nthread": 1, "max_depth": 6, **params}, xgb.DMatrix(x, label=y), 5)
    with pytest.raises(ForestError, match=match):
        HeapForest([(b, range(5))])


def test_forest_rejects_rows_too_narrow_for_its_splits():
    forest = HeapForest([(fit({"max_depth": 3}, 5), range(5))])
    with pytest.raises(ValueError, match="columns"):
        forest.predict(np.zeros((2, 2), np.float32))


@pytest.fixture(scope="module")
def window():
    return synthetic_window(300, seed=3)


@pytest.mark.parametrize("transform", ["log", "none"])
def test_compiled_model_uses_the_forest_for_small_batches_only(window, transform):
    cfg = FitConfig(rounds=60, transform=transform, point_loss=LOSS[transform])
    data = TrainingData.from_entries(window.snapshot())
    model = LatencyModel.from_blobs(*build_meta("v1", 1.0, run_cycle(data, None, cfg), cfg))
    c = CompiledModel(model)
    assert c.forest is not None and c.forest_rows == forest_rows(c.forest)
    assert 8 <= c.forest_rows <= 256
    rng = np.random.default_rng(4)
    probe = _probe_rows(c.forest)
    x = np.concatenate([window.rows(), probe]) * rng.uniform(0.9, 1.1, (1, N))
    x = x.astype(np.float32)
    for n in (1, 3, c.forest_rows, c.forest_rows + 1, len(x)):  # both paths
        ttft, tpot = c.predict(x[:n])
        assert np.array_equal(ttft, model.predict_key("ttft", x[:n]))
        assert np.array_equal(tpot, model.predict_key("tpot", x[:n]))


def test_a_forest_that_disagrees_with_xgboost_is_not_used(window, monkeypatch):
    cfg = FitConfig(rounds=10)
    data = TrainingData.from_entries(window.snapshot())
    model = LatencyModel.from_blobs(*build_meta("v1", 1.0, run_cycle(data, None, cfg), cfg))
    real = HeapForest.predict
    monkeypatch.setattr(HeapForest, "predict", lambda self, rows: [p + 1 for p in real(self, rows)])
    c = CompiledModel(model)
    assert c.forest is None and c.forest_rows == 0
    x = window.rows()[:4].astype(np.float32)
    assert np.array_equal(c.predict(x)[0], model.predict_key("ttft", x))


def test_forest_rows_follow_the_forest_size():
    small = HeapForest([(fit({"max_depth": 2}, 10), range(5))])
    big = HeapForest(
        [(fit({"max_depth": 6}, 200), range(5)), (fit({"max_depth": 6}, 200), range(5))]
    )
    assert forest_rows(small) == 256
    assert forest_rows(big) == 32
