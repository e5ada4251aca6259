"""The prediction-bound benchmark: walk-forward fitting, the error summary, and a tiny lab
run that observes the engine's state as each request reaches its pod."""

from __future__ import annotations

import numpy as np

from bench.bench_prediction_bound import (
    SHIFT_SETS,
    collect,
    errors,
    evaluate,
    shift_bound,
    summary,
    walk_forward,
)
from bench.lab.config import LabConfig
from bench.lab.synthetic import write_azure_trace, write_mooncake_trace
from shared.features import FEATURES


def test_walk_forward_learns_only_from_the_past():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 100, (600, 2))
    y = 10 + 3 * x[:, 0]
    pred = walk_forward(x, y, after=300, step=100, rounds=50)
    assert np.isnan(pred[:300]).all() and np.isfinite(pred[300:]).all()
    e = errors(pred, y, np.arange(600) >= 300)
    assert e["n"] == 300 and e["mape"] < 0.1
    assert errors(pred, y, np.zeros(600, bool)) == {"mape": None, "median_ape": None, "n": 0}


def test_collect_and_evaluate_on_a_small_lab_run(tmp_path):
    trace = write_mooncake_trace(tmp_path / "m.jsonl", 120, rate_rps=8.0)
    report, data = collect(LabConfig(trace=str(trace), policy="gie-default", pods=2))
    n = len(data["ttft"])
    assert n == report["completed"] == 120
    assert data["rows"].shape == (n, len(FEATURES)) and data["state"].shape == (n, 6)
    assert (data["state"] >= 0).all() and (data["ttft"] > 0).all()
    out = evaluate(data, after=60, step=30, tail_s=1.0)
    for target in ("ttft", "tpot"):
        want = {"gateway", "gateway v2", "gateway v2, queued split", "state oracle",
                "gateway + state oracle", "gateway v2 + state oracle",
                "trainer v2, squared", "trainer v2, relative",
                "trainer v2, relative or squared"}  # fmt: skip
        if target == "ttft":
            want |= {"gateway v2, residual", "analytic estimate"}
        assert set(out[target]) == want
        assert all(v["n"] > 0 and v["mape"] >= 0 for v in out[target].values())
        # the trainer's relative fit reports the level it chose at each of the two refits
        levels = out[target]["trainer v2, relative"]["levels"]
        assert len(levels) == 2 and all(a in (0.15, 0.25, 0.35, 0.5) for a in levels)
        either = out[target]["trainer v2, relative or squared"]["levels"]
        assert len(either) == 2 and all(a in (0.15, 0.25, 0.35, 0.5, "squared") for a in either)
    only = evaluate(data, after=60, step=30, tail_s=1.0, only=frozenset({"trainer v2, squared"}))
    assert set(only["tpot"]) == {"trainer v2, squared"}
    assert set(only["ttft"]) == {"analytic estimate", "trainer v2, squared"}


def test_the_shift_bound_scores_each_learner_around_the_shift(tmp_path):
    first = write_mooncake_trace(tmp_path / "m.jsonl", 160, rate_rps=8.0)
    then = write_azure_trace(tmp_path / "a.csv", 120, rate_rps=12.0, seed=3)
    config = LabConfig(trace=str(first), then_trace=str(then), policy="gie-default", pods=2)
    _, data = collect(config)
    assert set(data["index"][data["index"] >= 160]) and data["finished"].min() > 0
    out = shift_bound(data, 160, step=40, lead=100)
    assert out["labels_known"] == "at dispatch" and out["step"] == 40
    sets = out["sets"]
    assert set(sets) == {*SHIFT_SETS, "cross-fit on the second trace (non-causal)"}
    plain, ref = (
        sets["trainer v2, relative"]["shift"],
        sets["cross-fit on the second trace (non-causal)"]["shift"],
    )
    # the reference keeps the walk-forward's first-trace predictions: the same bar
    assert ref["pre_ttft_mape"] == plain["pre_ttft_mape"] is not None
    assert ref["second_trace_samples"] == plain["second_trace_samples"] == 120
    for tl in sets.values():
        assert tl["points"] and all(p["ttft_mape"] >= 0 for p in tl["points"] if p["ttft_mape"])


def test_the_summary_prints_sets_that_scored_nothing():
    empty = {"mape": None, "median_ape": None, "n": 0}
    result = {"policy": "p", "trace": "t", "rate_scale": 1.0, "requests": 10, "after": 2000,
              "errors": {"ttft": {"analytic estimate": empty}, "tpot": {}}}  # fmt: skip
    assert "analytic estimate" in summary(result) and "-" in summary(result)
