"""HPA arithmetic against the documented algorithm (kubernetes.io, Horizontal Pod Autoscaling:
desiredReplicas = ceil[currentReplicas * (currentMetricValue / desiredMetricValue)], 0.1
tolerance, stabilisation windows 0 s up / 300 s down, default rate policies)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.autoscale.hpa import Behavior, Stabilizer, desired_replicas


@pytest.mark.parametrize(
    "current, metric, target, expected",
    [
        # the documentation's example: 200m current, 100m target -> double
        (1, 200, 100, 2),
        # 50m / 100m -> halve
        (4, 50, 100, 2),
        (3, 7.5, 5, 5),  # ceil(4.5)
        (10, 3, 5, 6),
        (4, 0, 5, 0),  # idle: formula gives 0 (clamped later to minReplicas)
        # tolerance: |ratio - 1| <= 0.1 keeps the count
        (10, 1.09, 1, 10),
        (10, 1.1, 1, 11),  # as in Go: |1 - 1.1| is 0.10000000000000009 in float64
        (10, 0.9, 1, 10),
        (10, 1.05, 1, 10),
        (10, 1.11, 1, 12),  # ceil(11.1)
        (10, 0.89, 1, 9),  # ceil(8.9)
        (1, 0.95, 0.9, 1),  # ratio 1.056: within tolerance
        (2, 0.3, 0.1, 6),  # exact ratio 3 even with float noise
        (0, 100, 1, 0),  # 0 replicas: scaling disabled
    ],
)
def test_formula_and_tolerance(current, metric, target, expected):
    assert desired_replicas(current, metric, target) == expected


def test_custom_tolerance():
    assert desired_replicas(10, 1.15, 1, tolerance=0.2) == 10
    assert desired_replicas(10, 1.05, 1, tolerance=0.0) == 11


@pytest.mark.parametrize("metric, target", [(1, 0), (1, -1), (math.nan, 1), (-1, 1)])
def test_bad_inputs(metric, target):
    with pytest.raises(ValueError):
        desired_replicas(2, metric, target)


@given(
    current=st.integers(1, 500),
    metric=st.floats(0, 1e4, allow_nan=False),
    target=st.floats(0.01, 1e3),
)
def test_formula_properties(current, metric, target):
    d = desired_replicas(current, metric, target)
    ratio = metric / target
    if abs(ratio - 1) <= 0.1:
        assert d == current
    else:
        assert d >= current * ratio - 1e-6
        assert d < current * ratio + 1
        assert (d > current) == (ratio > 1)


def test_clamp_to_min_and_max():
    s = Stabilizer(Behavior(min_replicas=2, max_replicas=5, scale_down_window_s=0))
    d = s.recommend(0, 4, 0, 5)
    assert (d.desired, d.recommended, d.limited_by) == (0, 2, "min")
    d = s.recommend(1, 4, 50, 5)
    assert (d.desired, d.recommended, d.limited_by) == (40, 5, "max")


def test_scale_up_is_immediate():
    s = Stabilizer()
    d = s.recommend(0, 4, 10, 5)
    assert d.recommended == 8 and d.limited_by == ""


def test_scale_down_waits_for_the_window():
    """Recommendations over the last 300 s: the highest wins, so a dip is not followed."""
    s = Stabilizer()
    assert s.recommend(0, 4, 5, 5).recommended == 4  # steady
    d = s.recommend(10, 4, 1, 5)  # load drops: formula says 1
    assert (d.desired, d.recommended, d.limited_by) == (1, 4, "scale-down window")
    assert s.recommend(299, 4, 1, 5).recommended == 4  # the t=0 "4" still in the window
    assert s.recommend(301, 4, 1, 5).recommended == 1  # it left; all recent say 1


def test_scale_down_goes_to_highest_recent():
    s = Stabilizer(Behavior(scale_down_window_s=60))
    s.recommend(0, 8, 5, 5)  # 8
    s.recommend(20, 8, 3, 5)  # 5 (ceil 4.8)
    s.recommend(40, 8, 1, 5)  # 2
    assert s.recommend(61, 8, 1, 5).recommended == 5  # t=0 left the window, t=20 had 5
    assert s.recommend(81, 8, 1, 5).recommended == 2


def test_scale_up_window():
    s = Stabilizer(Behavior(scale_up_window_s=30, scale_down_window_s=0))
    s.recommend(0, 4, 5, 5)  # 4
    d = s.recommend(10, 4, 10, 5)  # wants 8, but 4 was recommended within 30 s
    assert (d.recommended, d.limited_by) == (4, "scale-up window")
    assert s.recommend(31, 4, 10, 5).recommended == 8


def test_scale_up_rate_limit():
    s = Stabilizer(Behavior(max_replicas=1000))
    # default: at most max(100 %, 4 pods) more per 15 s period; HPA still settles at 40
    d = s.recommend(0, 2, 100, 5)
    assert (d.recommended, d.next_step) == (40, 6)  # 2 + 4 pods
    d = s.recommend(1, 10, 100, 5)
    assert (d.recommended, d.next_step) == (200, 20)  # 10 + 100 %
    d = s.recommend(2, 4, 5, 5)
    assert d.next_step == d.recommended  # held by the window: no step beyond it


def test_scale_down_rate_limit():
    s = Stabilizer(Behavior(scale_down_window_s=0, scale_down_percent=50))
    d = s.recommend(0, 10, 1, 5)
    assert (d.recommended, d.next_step) == (2, 5)


def test_behavior_validation():
    with pytest.raises(ValueError):
        Behavior(min_replicas=0)
    with pytest.raises(ValueError):
        Behavior(min_replicas=5, max_replicas=4)
    with pytest.raises(ValueError):
        Behavior(scale_down_window_s=-1)


def test_history_is_bounded():
    s = Stabilizer(Behavior(scale_down_window_s=10))
    for t in range(1000):
        s.recommend(float(t), 4, 5, 5)
    assert len(s._history) <= 12
