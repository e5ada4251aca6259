"""One training cycle: holdout from unseen samples, comparison with the current model on the
same holdout, promotion only when not worse by the margin, reasons recorded."""

from __future__ import annotations

import numpy as np
import pytest

from services.trainer.cycle import build_meta, decide, run_cycle, select_holdout
from services.trainer.fitting import FitConfig, TrainingData
from shared.latency_model import LatencyModel, ModelSpec
from tests.unit.trainer_synth import synthetic_samples

SPECS = (ModelSpec("ttft"), ModelSpec("tpot"), ModelSpec("ttft", "quantile", 0.9))


def data(n: int, seed: int = 1, start: int = 0, **kw) -> TrainingData:
    samples = synthetic_samples(n, seed=seed, prefix=f"s{seed}-", noise=0.1, **kw)
    d = TrainingData.from_samples(samples)
    return TrainingData(d.rows, d.labels, d.ts + start)


def published(result, cfg, version="v1") -> LatencyModel:
    meta, blobs = build_meta(version, 1.0, result, cfg)
    return LatencyModel.from_blobs(meta, blobs)


def test_first_holdout_is_a_random_fraction_of_everything():
    d = data(200)
    mask = select_holdout(d, fraction=0.1, seed=0)
    assert mask.sum() == 20
    assert select_holdout(data(19), fraction=0.5, seed=0).sum() == 0


def test_holdout_comes_only_from_unseen_samples_and_at_most_half_of_them():
    d = data(200)
    cut = float(d.ts[149])  # the current model trained on the first 150
    mask = select_holdout(d, fraction=0.1, seed=0, unseen_after=cut, has_current=True)
    assert mask.sum() == 20 and np.all(d.ts[mask] > cut)
    few = select_holdout(d, fraction=0.5, seed=0, unseen_after=float(d.ts[189]), has_current=True)
    assert few.sum() == 5  # 10 unseen: half held out, half trained on
    foreign = select_holdout(d, fraction=0.1, seed=0, unseen_after=None, has_current=True)
    assert foreign.sum() == 20


@pytest.mark.parametrize(
    ("cand", "cur", "decision", "worse"),
    [
        ({"ttft": 0.10, "tpot": 0.10}, {"ttft": 0.10, "tpot": 0.10}, "promote", []),
        ({"ttft": 0.104, "tpot": 0.05}, {"ttft": 0.10, "tpot": 0.10}, "promote", []),  # in margin
        ({"ttft": 0.12, "tpot": 0.05}, {"ttft": 0.10, "tpot": 0.10}, "reject", ["ttft"]),
        ({"ttft": 0.12, "tpot": 0.20}, {"ttft": 0.10, "tpot": 0.10}, "reject", ["ttft", "tpot"]),
        ({"ttft": 0.12}, {}, "skip", []),  # nothing comparable
    ],
)
def test_decide(cand, cur, decision, worse):
    c = {k: {"mape": v, "n": 50} for k, v in cand.items()}
    k = {k: {"mape": v, "n": 50} for k, v in cur.items()}
    d, reason, _compared, worse_keys = decide(SPECS, c, k, margin=0.05, min_holdout=20)
    assert (d, worse_keys) == (decision, worse)
    if d == "reject":
        assert "current" in reason and worse[0] in reason


def test_decide_uses_pinball_for_quantile_models_and_needs_enough_rows():
    c = {"ttft_p90": {"mape": 0.5, "pinball": 10.0, "n": 50}}
    k = {"ttft_p90": {"mape": 0.1, "pinball": 12.0, "n": 50}}
    assert decide(SPECS, c, k, margin=0.0, min_holdout=20)[0] == "promote"
    c["ttft_p90"]["n"] = 5
    assert decide(SPECS, c, k, margin=0.0, min_holdout=20)[:2] == (
        "skip",
        "too_few_unseen_samples",
    )


def test_a_worse_candidate_is_rejected_and_a_good_one_promoted():
    # squared loss: the promotion rule is under test, not the relative loss's level choice
    # (which fits four levels on a small sample and can land 6% off on a 90-row holdout)
    cfg = FitConfig(rounds=150, min_holdout=10, point_loss="squared")
    first = data(600, seed=1)
    strong = run_cycle(first, None, cfg)
    current = published(strong, cfg)
    later = TrainingData(
        np.vstack([first.rows, data(300, seed=2).rows]),
        {t: np.concatenate([first.labels[t], data(300, seed=2).labels[t]]) for t in first.labels},
        np.concatenate([first.ts, first.ts.max() + 1 + np.arange(300)]),
    )
    weak = run_cycle(later, current, FitConfig(rounds=2, min_holdout=10, point_loss="squared"))
    assert weak.decision == "reject" and set(weak.worse_keys) == {"ttft", "tpot"}
    assert weak.compared_with == "v1" and weak.holdout == 90
    assert weak.reason.startswith("worse: ")
    for key in ("ttft", "tpot"):
        assert weak.metrics[key]["mape"] > weak.current_metrics[key]["mape"]
        assert weak.metrics[key]["n"] == weak.current_metrics[key]["n"] == 90  # same holdout
    good = run_cycle(later, current, cfg)
    assert good.decision == "promote" and good.reason == "not_worse"


def test_too_few_unseen_samples_skips_without_fitting():
    cfg = FitConfig(rounds=20, min_holdout=20)
    d = data(300)
    current = published(run_cycle(d, None, cfg), cfg)
    result = run_cycle(d, current, cfg)  # nothing new since the current model
    assert result.decision == "skip" and result.reason == "too_few_unseen_samples"
    assert result.models == {}


def test_an_incomparable_current_model_is_replaced():
    d = data(300)
    mean_cfg = FitConfig(rounds=10)
    current = published(run_cycle(d, None, mean_cfg), mean_cfg)
    result = run_cycle(d, current, FitConfig(rounds=10, objective="quantile"))
    assert result.decision == "promote" and result.reason == "not_comparable"


def test_too_few_samples_for_a_target():
    d = data(50)
    result = run_cycle(d, None, FitConfig(min_samples=100, rounds=2))
    assert result.decision == "skip" and result.reason.startswith("too_few_samples")
