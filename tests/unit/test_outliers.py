"""Passive outlier ejection of failing pods (pure, time passed in)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from services.gateway.outliers import OutlierEjector


@dataclass(frozen=True)
class Pod:
    name: str


PODS = [Pod("a"), Pod("b"), Pod("c")]


def names(xs) -> list[str]:
    return [p.name for p in xs]


def test_a_failure_ejects_for_base_then_doubles_up_to_max():
    o = OutlierEjector(base_s=5.0, max_s=20.0)
    assert o.failed("a", 100.0) == 5.0
    assert names(o.filter(PODS, 104.9)) == ["b", "c"]
    assert names(o.filter(PODS, 105.0)) == ["a", "b", "c"]  # back, on probation
    assert o.failed("a", 105.1) == 10.0  # failed again right after: twice as long
    assert o.failed("a", 116.0) == 20.0
    assert o.failed("a", 137.0) == 20.0  # capped
    assert o.ejections == 4


def test_a_success_or_a_quiet_spell_resets():
    o = OutlierEjector(base_s=5.0, max_s=60.0)
    o.failed("a", 0.0)
    o.failed("a", 5.5)  # 10 s now
    o.succeeded("a")
    assert not o.ejected("a", 6.0)
    assert o.failed("a", 7.0) == 5.0
    assert o.failed("a", 7.0 + 5.0 + 5.0 + 1.0) == 5.0  # long after its ejection ended


def test_never_leaves_out_more_than_half_of_the_candidates():
    o = OutlierEjector()  # max_fraction 0.5
    for p in PODS:
        o.failed(p.name, 0.0)
    assert names(o.filter(PODS, 1.0)) == ["b", "c"]  # 1 of 3 out: ties keep the first
    assert o.ejected_now(1.0) == ["a", "b", "c"]
    assert names(o.filter(PODS[:1], 1.0)) == ["a"]  # one candidate: never left out
    assert names(o.filter(PODS[:2], 1.0)) == ["b"]


def test_past_the_cap_the_repeat_offenders_stay_out():
    o = OutlierEjector(base_s=5.0, max_s=60.0, max_fraction=0.5)
    pods = [Pod(n) for n in "abcdefgh"]
    for n in "abcdef":  # 6 of 8 failed once
        o.failed(n, 0.0)
    o.failed("e", 1.0)  # e and f again within their ejection: 10 s, until 11
    o.failed("f", 1.0)
    o.failed("c", 2.0)  # c too, later: until 12
    # 4 of 8 may be out: c, e, f (10 s; the latest end first), then the first 5 s one
    assert len(o.ejected_now(3.0)) == 6
    assert names(o.filter(pods, 3.0)) == ["b", "d", "g", "h"]
    # once a, b and d are back (5 s), c, e and f are out, under the cap
    assert names(o.filter(pods, 6.0)) == ["a", "b", "d", "g", "h"]
    none = OutlierEjector(max_fraction=0.0)
    none.failed("a", 0.0)
    assert names(none.filter(PODS, 1.0)) == ["a", "b", "c"]


def test_disabled():
    o = OutlierEjector(base_s=0.0)
    assert not o.enabled and o.failed("a", 0.0) == 0.0
    assert names(o.filter(PODS, 0.0)) == ["a", "b", "c"]


def test_bounded():
    o = OutlierEjector(base_s=1.0, max_s=2.0)
    for i in range(1000):
        o.failed(f"p{i}", float(i))
    assert len(o._pods) <= 66


def test_bad_config():
    with pytest.raises(ValueError):
        OutlierEjector(base_s=5.0, max_s=1.0)
    with pytest.raises(ValueError):
        OutlierEjector(max_fraction=1.0)
