"""The predictor client's circuit breaker as a pure state machine (time passed in)."""

from __future__ import annotations

import pytest

from services.gateway.breaker import CLOSED, HALF_OPEN, OPEN, BreakerConfig, CircuitBreaker


def opened(failures: int = 3, open_s: float = 0.5, max_open_s: float = 4.0) -> CircuitBreaker:
    b = CircuitBreaker(BreakerConfig(failures, open_s, max_open_s))
    for _ in range(failures):
        assert b.allow(10.0) == "call"
        b.record(False, 10.0)
    assert b.state == OPEN
    return b


def test_closed_calls_and_success_resets_the_count():
    b = CircuitBreaker(BreakerConfig(failures=3))
    for _ in range(10):  # failures that are never 3 in a row keep it closed
        b.record(False, 0.0)
        b.record(False, 0.0)
        assert b.record(True, 0.0) is None
        assert b.state == CLOSED and b.allow(0.0) == "call"


def test_consecutive_failures_open_it_and_calls_are_skipped():
    b = CircuitBreaker(BreakerConfig(failures=3, open_s=0.5))
    assert b.record(False, 1.0) is None
    assert b.record(False, 1.1) is None
    assert b.record(False, 1.2) == OPEN
    assert b.allow(1.3) == "skip"
    assert b.allow(1.69) == "skip"


def test_half_open_after_open_s_allows_one_probe_and_skips_the_rest():
    b = opened()
    assert b.allow(10.49) == "skip"
    assert b.allow(10.5) == "probe"
    assert b.state == HALF_OPEN
    assert [b.allow(10.6) for _ in range(5)] == ["skip"] * 5


def test_probe_success_closes():
    b = opened()
    assert b.allow(11.0) == "probe"
    assert b.record(True, 11.01, probe=True) == CLOSED
    assert b.allow(11.02) == "call"


@pytest.mark.parametrize(
    ("probe_failures", "wait"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0), (6, 4.0)],  # doubles from 0.5, capped at 4
)
def test_failed_probes_double_the_wait_up_to_the_cap(probe_failures, wait):
    b = opened(open_s=0.5, max_open_s=4.0)
    now = 10.0 + 0.5
    for _ in range(probe_failures):
        assert b.allow(now) == "probe"
        assert b.record(False, now, probe=True) == OPEN
        last = now
        now += b.open_for_s
    assert b.open_for_s == wait
    assert b.allow(last + wait - 0.01) == "skip"
    assert b.allow(last + wait) == "probe"


def test_success_resets_the_backoff():
    b = opened(open_s=0.5)
    b.allow(10.5)
    b.record(False, 10.5, probe=True)  # now 1.0
    b.allow(11.5)
    b.record(True, 11.5, probe=True)
    for _ in range(3):
        b.record(False, 12.0)
    assert b.state == OPEN and b.open_for_s == 0.5
    assert b.allow(12.5) == "probe"


def test_late_success_of_an_earlier_call_closes_it():
    b = opened()
    assert b.record(True, 10.2) == CLOSED  # a call sent before it opened was answered
    assert b.allow(10.2) == "call"


def test_failures_while_open_or_non_probe_failures_while_half_open_change_nothing():
    b = opened()
    assert b.record(False, 10.1) is None and b.state == OPEN
    assert b.allow(10.5) == "probe"
    assert b.record(False, 10.6) is None and b.state == HALF_OPEN  # not the probe's outcome
    assert b.allow(10.7) == "skip"


def test_a_probe_that_never_reports_is_replaced_after_max_open_s():
    b = opened(open_s=0.5, max_open_s=4.0)
    assert b.allow(10.5) == "probe"
    assert b.allow(14.49) == "skip"
    assert b.allow(14.5) == "probe"


def test_zero_failures_never_opens():
    b = CircuitBreaker(BreakerConfig(failures=0))
    for _ in range(100):
        b.record(False, 0.0)
    assert b.state == CLOSED and b.allow(0.0) == "call"


@pytest.mark.parametrize(("f", "o", "m"), [(-1, 0.5, 1.0), (3, 0.0, 1.0), (3, 2.0, 1.0)])
def test_bad_config(f, o, m):
    with pytest.raises(ValueError):
        BreakerConfig(f, o, m)
