"""The relative point loss: a mean model fitted for MAPE (pinball at a chosen level of the
log target) on right-skewed latencies, the level's choice, its spec and metadata, and its
serving through the predictor's compiled path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from services.predictor.inference import CompiledModel
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData, fit_models, select_point_model
from services.trainer.settings import TrainerSettings
from shared.features import FEATURES
from shared.latency_model import LatencyModel, ModelSpec, evaluate, spec_from_info
from shared.schemas import ModelMeta

N = 3000


def skewed(n: int, seed: int) -> TrainingData:
    """Latencies that are a smooth function of two columns, times a right-skewed factor:
    most requests see none of it, one in four is slowed two- to ten-fold (a long prefill
    beside it), as the lab's TPOT is."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, len(FEATURES)))
    rows[:, 2] = rng.uniform(100, 8000, n)  # input tokens
    rows[:, 4] = rng.integers(0, 32, n)  # running
    base = 20.0 + 0.02 * rows[:, 2] + 1.5 * rows[:, 4]
    slow = np.where(rng.random(n) < 0.25, rng.uniform(2.0, 10.0, n), 1.0)
    noise = np.exp(rng.normal(0.0, 0.05, n))
    y = base * slow * noise
    return TrainingData.from_arrays(rows, {"ttft": y, "tpot": y / 10.0})


@pytest.fixture(scope="module")
def data() -> TrainingData:
    return skewed(N, seed=1)


@pytest.fixture(scope="module")
def unseen() -> TrainingData:
    return skewed(1000, seed=2)


def _mape(model, rows, y) -> float:
    return float(np.mean(np.abs(model.predict(rows) - y) / y))


def test_relative_loss_has_less_relative_error_than_squared(data, unseen):
    mask = np.ones(len(data), dtype=bool)
    sq = fit_models(data, mask, FitConfig(targets=("ttft",), rounds=100, point_loss="squared"))[
        "ttft"
    ]
    rel = fit_models(data, mask, FitConfig(targets=("ttft",), rounds=100, point_loss="relative"))[
        "ttft"
    ]
    y = unseen.labels["ttft"]
    assert rel.spec.relative and rel.spec.key == "ttft"
    m_sq, m_rel = _mape(sq, unseen.rows, y), _mape(rel, unseen.rows, y)
    # the 1/y-weighted median sits at the unslowed level: far less relative error
    assert m_rel < 0.75 * m_sq, (m_rel, m_sq)
    assert rel.spec.level < 0.5


def test_the_chosen_level_has_the_least_error_on_the_held_out_rows(data):
    cfg = FitConfig(targets=("ttft",), rounds=60, point_loss="relative",
                    point_levels=(0.5, 0.15, 0.3), squared_candidate=False)  # fmt: skip
    x, y, ts = data.rows, data.labels["ttft"], data.ts
    for split in ("recent", "random"):
        c = replace(cfg, selection_split=split)
        chosen, scores = select_point_model(x, y, c.specs()[0], c, seed=0, ts=ts)
        assert scores is not None and set(scores) == {"0.15", "0.3", "0.5"}
        assert chosen.relative and scores[f"{chosen.level:g}"] == min(scores.values())
        assert scores["0.5"] > min(scores.values())  # skewed data: the median is not the best
        again = select_point_model(x, y, c.specs()[0], c, seed=0, ts=ts)
        assert again == (chosen, scores)  # deterministic per seed
    recent = replace(cfg, selection_split="recent")
    with pytest.raises(ValueError, match="every row's time"):
        select_point_model(x, y, recent.specs()[0], recent)  # recent needs the times


def test_too_few_rows_or_one_level_take_the_middle_level(data):
    cfg = FitConfig(targets=("ttft",), rounds=5, point_loss="relative",
                    point_levels=(0.1, 0.2, 0.4))  # fmt: skip
    spec = cfg.specs()[0]
    x, y = data.rows[:20], data.labels["ttft"][:20]
    assert select_point_model(x, y, spec, cfg) == (replace(spec, level=0.2), None)
    one = FitConfig(targets=("ttft",), rounds=5, point_loss="relative", point_levels=(0.3,),
                    squared_candidate=False)  # fmt: skip
    chosen, scores = select_point_model(data.rows, data.labels["ttft"], one.specs()[0], one)
    assert (chosen.level, scores) == (0.3, None)
    two = replace(one, squared_candidate=True)  # one level and squared error: a choice
    chosen, scores = select_point_model(data.rows, data.labels["ttft"], two.specs()[0], two)
    assert scores is not None and set(scores) == {"0.3", "squared"}


def test_selection_trains_on_at_most_selection_rows(data, monkeypatch):
    import services.trainer.fitting as fitting

    sizes: list[int] = []
    real = fitting.fit_booster

    def spy(x, y, spec, **kw):
        sizes.append(len(y))
        return real(x, y, spec, **kw)

    monkeypatch.setattr(fitting, "fit_booster", spy)
    cfg = FitConfig(targets=("ttft",), rounds=3, point_loss="relative", selection_rows=500)
    fit_models(data, np.ones(len(data), dtype=bool), cfg)
    # four candidate levels on 500 rows each, then the chosen one on every row
    assert sizes == [500] * 4 + [len(data)]


def test_relative_models_round_trip_through_metadata_and_serve(data):
    cfg = FitConfig(rounds=30, point_loss="relative", objective="both", features="v2")
    result = run_cycle(data, None, cfg)
    meta, blobs = build_meta("v1", 1.0, result, cfg)
    info = meta.targets["ttft"]
    assert info["loss"] == "relative" and info["level"] == result.models["ttft"].spec.level
    assert meta.params["point_loss"] == "relative"
    loaded = LatencyModel.from_blobs(ModelMeta.decode(meta.encode()), blobs)
    assert loaded.spec("ttft") == result.models["ttft"].spec
    assert loaded.key_for("ttft", "mean") == "ttft"  # served where a mean model is
    assert loaded.spec("ttft_p90").loss == "squared"  # quantile models have no loss
    compiled = CompiledModel(loaded, "mean")
    ttft, _ = compiled.predict(data.rows[:50].astype(np.float32))
    assert np.array_equal(ttft, loaded.predict_key("ttft", data.rows[:50]))


def test_a_relative_candidate_is_compared_with_a_squared_current_on_mape(data):
    sq_cfg = FitConfig(targets=("ttft", "tpot"), rounds=30, point_loss="squared")
    squared = run_cycle(data, None, sq_cfg)
    meta, blobs = build_meta("v1", 1.0, squared, sq_cfg)
    current = LatencyModel.from_blobs(meta, blobs)
    later = TrainingData(data.rows, data.labels, data.ts + 10.0)  # unseen by the current
    cfg = FitConfig(targets=("ttft", "tpot"), rounds=30, point_loss="relative")
    result = run_cycle(later, current, cfg)
    assert set(result.compared_keys) == {"ttft", "tpot"}
    assert result.decision == "promote", result.reason
    for key in ("ttft", "tpot"):
        assert result.metrics[key]["mape"] < result.current_metrics[key]["mape"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss": "absolute"}, "unknown loss"),
        ({"loss": "relative", "level": 0.3}, "log transform"),
        ({"loss": "relative", "transform": "log"}, "level must be in"),
        ({"loss": "relative", "transform": "log", "level": 1.0}, "level must be in"),
        ({"level": 0.3}, "only a relative model has a level"),
        ({"objective": "quantile", "loss": "relative", "transform": "log", "level": 0.3},
         "only a mean model"),
    ],
)  # fmt: skip
def test_bad_relative_specs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelSpec("ttft", **kwargs)


def test_spec_from_info_reads_loss_and_level():
    spec = spec_from_info("tpot", {"transform": "log", "loss": "relative", "level": 0.25})
    assert spec == ModelSpec("tpot", transform="log", loss="relative", level=0.25)
    assert spec.params() == {"objective": "reg:quantileerror", "quantile_alpha": 0.25}
    assert spec_from_info("tpot", {"transform": "log"}).loss == "squared"  # older versions
    with pytest.raises(ValueError):
        spec_from_info("tpot", {"transform": "log", "loss": "relative", "level": "low"})


def test_evaluate_of_a_relative_model_is_mape():
    spec = ModelSpec("ttft", transform="log", loss="relative", level=0.3)
    assert spec.primary_metric == "mape"
    m = evaluate(np.array([90.0]), np.array([100.0]), spec)
    assert m["mape"] == pytest.approx(0.1)


def test_settings():
    cfg = TrainerSettings(point_loss="relative", point_levels=[0.2, 0.4]).fit_config()
    assert cfg.point_loss == "relative" and cfg.point_levels == (0.2, 0.4)
    with pytest.raises(ValueError, match="target_transform log"):
        TrainerSettings(point_loss="relative", target_transform="none")
    with pytest.raises(ValueError, match="point_levels"):
        TrainerSettings(point_levels=[0.0, 0.5])
    with pytest.raises(ValueError, match="point_levels"):
        FitConfig(point_levels=())


def test_level_candidates_are_fitted_coarser_at_the_same_learning_budget(data, monkeypatch):
    import services.trainer.fitting as fitting

    calls: list[tuple[int, dict]] = []
    real = fitting.fit_booster

    def spy(x, y, spec, *, rounds, params, seed):
        calls.append((rounds, params))
        return real(x, y, spec, rounds=rounds, params=params, seed=seed)

    monkeypatch.setattr(fitting, "fit_booster", spy)
    cfg = FitConfig(targets=("ttft",), rounds=200, eta=0.05, point_loss="relative")
    fit_models(data, np.ones(len(data), dtype=bool), cfg)
    *candidates, final = calls
    assert len(candidates) == len(cfg.point_levels)
    for rounds, params in candidates:
        assert rounds == fitting.SELECTION_ROUNDS == 80
        assert params["eta"] == pytest.approx(0.05 * 200 / 80)
        assert params["max_bin"] == fitting.SELECTION_MAX_BIN
    assert final == (200, cfg.xgb_params())  # the model itself at the configured size
    # a small model is not enlarged, a fast learner not slowed, the raised eta is capped
    assert FitConfig(rounds=30, eta=0.05).selection_fit()[0] == 30
    assert FitConfig(rounds=30, eta=0.05).selection_fit()[1]["eta"] == 0.05
    assert FitConfig(rounds=400, eta=0.5).selection_fit()[1]["eta"] == 0.5
    assert FitConfig(rounds=800, eta=0.1).selection_fit()[1]["eta"] == 0.3
    with pytest.raises(ValueError, match="selection_rounds"):
        FitConfig(selection_rounds=0)


def test_recent_selection_scores_the_levels_on_the_newest_rows(data, monkeypatch):
    import services.trainer.fitting as fitting

    n = len(data)
    ts = np.arange(n, dtype=float)[::-1].copy()  # newest rows first: order is not time
    rows = data.rows.copy()
    rows[:, 0] = ts  # column 0 (is_queued) carries each row's time, to see which rows fit
    fitted: list[np.ndarray] = []
    real = fitting.fit_booster

    def spy(x, y, spec, **kw):
        fitted.append(x[:, 0].copy())
        return real(x, y, spec, **kw)

    monkeypatch.setattr(fitting, "fit_booster", spy)
    cfg = FitConfig(targets=("ttft",), rounds=5, point_loss="relative", selection_split="recent")
    spec = cfg.specs()[0]
    select_point_model(rows, data.labels["ttft"], spec, cfg, ts=ts)
    newest = int(n * fitting.SELECTION_SHARE)
    for cols in fitted:  # every candidate trains only on rows older than the scored ones
        assert cols.max() < n - newest
        assert len(cols) == min(cfg.selection_rows, n - newest)
    fitted.clear()
    random_cfg = replace(cfg, selection_split="random")
    select_point_model(rows, data.labels["ttft"], spec, random_cfg, ts=ts)
    assert max(c.max() for c in fitted) >= n - newest  # a random share mixes times
    with pytest.raises(ValueError, match="selection_split"):
        FitConfig(selection_split="oldest")


def test_recent_selection_follows_a_ramp_the_features_do_not_show():
    """Latencies that grow with time at equal features (load rising beyond what the row
    shows): the levels scored on the newest rows choose a higher level than a random share."""
    rng = np.random.default_rng(3)
    n = 3000
    rows = np.zeros((n, len(FEATURES)))
    rows[:, 2] = rng.uniform(100, 8000, n)
    ts = np.arange(n, dtype=float)
    ramp = np.exp(1.5 * ts / n)  # 4.5x over the window
    y = (20.0 + 0.02 * rows[:, 2]) * ramp * np.exp(rng.normal(0.0, 0.3, n))
    levels = (0.15, 0.25, 0.35, 0.5, 0.65, 0.8)
    chosen = {}
    for split in ("random", "recent"):
        cfg = FitConfig(targets=("ttft",), rounds=60, point_loss="relative", point_levels=levels,
                        selection_split=split, squared_candidate=False)  # fmt: skip
        chosen[split] = select_point_model(rows, y, cfg.specs()[0], cfg, ts=ts)[0].level
    assert chosen["recent"] > chosen["random"], chosen


def test_squared_error_competes_with_the_levels(data):
    x, y = data.rows, data.labels["ttft"]
    cfg = FitConfig(targets=("ttft",), rounds=60, point_loss="relative", squared_candidate=True)
    chosen, scores = select_point_model(x, y, cfg.specs()[0], cfg, seed=0)
    assert scores is not None and set(scores) == {"0.15", "0.25", "0.35", "0.5", "squared"}
    name = f"{chosen.level:g}" if chosen.relative else "squared"
    assert scores[name] == min(scores.values())
    # log-normal noise without the slow tail, and a level far too low for it: squared
    # error wins and the model is fitted with it
    rng = np.random.default_rng(4)
    even = TrainingData.from_arrays(
        x, {"ttft": (20.0 + 0.02 * x[:, 2]) * np.exp(rng.normal(0.0, 0.3, len(x)))}
    )
    low = replace(cfg, point_levels=(0.02,))
    chosen, scores = select_point_model(x, even.labels["ttft"], low.specs()[0], low, seed=0)
    assert scores["squared"] < scores["0.02"]
    assert (chosen.loss, chosen.level, chosen.key) == ("squared", None, "ttft")
    model = fit_models(even, np.ones(len(even), dtype=bool), low)["ttft"]
    assert model.spec == chosen
