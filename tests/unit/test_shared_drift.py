"""Rolling MAPE of served predictions (the live drift gauge)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.drift import DriftTracker, RollingMape
from shared.schemas import TrainingSample


def test_rolling_window_forgets_old_errors():
    r = RollingMape(size=2)
    assert r.mape is None
    assert r.observe(110.0, 100.0)  # 10%
    assert r.observe(50.0, 100.0)  # 50%
    assert r.mape == pytest.approx(0.3)
    r.observe(100.0, 100.0)  # 0%: the 10% falls out
    assert r.mape == pytest.approx(0.25) and r.count == 2 and r.observed_total == 3


@pytest.mark.parametrize(
    ("pred", "actual"),
    [(None, 1.0), (1.0, None), (math.nan, 1.0), (1.0, math.inf), (-1.0, 5.0), (1.0, -5.0)],
)
def test_unusable_pairs_are_ignored(pred, actual):
    r = RollingMape()
    assert not r.observe(pred, actual)
    assert r.mape is None


def test_zero_actual_is_floored():
    r = RollingMape()
    r.observe(0.5, 0.0)
    assert r.mape == pytest.approx(0.5)


@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e4)), max_size=300), st.integers(1, 50))
def test_matches_direct_computation(pairs, size):
    r = RollingMape(size)
    for p, a in pairs:
        r.observe(p, a)
    tail = pairs[-size:]
    if not tail:
        assert r.mape is None
        return
    expected = sum(abs(p - a) / max(a, 1.0) for p, a in tail) / len(tail)
    assert r.mape == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_tracker_observes_samples():
    t = DriftTracker(size=10)
    s = TrainingSample(
        request_id="r", pool="p", pod="a", model="m", features=[0.0] * 11, e2e_ms=500.0,
        input_tokens=1, output_tokens=8, streaming=True, ts=1.0, ttft_ms=100.0, tpot_ms=10.0,
        routing="predicted", model_version="v3", predicted_ttft_ms=90.0, predicted_tpot_ms=None,
    )  # fmt: skip
    assert t.observe_sample(s) == ["ttft"]
    assert t.mape("ttft") == pytest.approx(0.1) and t.mape("tpot") is None
    assert t.versions["ttft"] == "v3" and t.count("ttft") == 1
    assert t.mape("e2e") is None and not t.observe("e2e", 1.0, 1.0)
    with pytest.raises(ValueError):
        RollingMape(0)
