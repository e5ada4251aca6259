"""`headroom bench faults` arithmetic (pure): recovery time, sample accounting, excused
failures and the done-means verdict."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.faults.report import (
    AFTER,
    BEFORE,
    FAULT,
    Ledger,
    Rec,
    Timeline,
    percentile,
    recovery_s,
    sample_counts,
    summarize,
)
from bench.faults.scenarios import all_scenarios


def rec(sent, path="predicted", phase=FAULT, ok=True, rid=None, **kw) -> Rec:
    return Rec("s", phase, sent, path=path, ok=ok, request_id=rid, **kw)


def test_recovery_is_zero_when_predicted_routing_never_stopped():
    recs = [rec(0.5, phase=BEFORE), rec(1.5), rec(2.5), rec(9.0, phase=AFTER)]
    assert recovery_s(recs, Timeline(1.0, 3.0)) == 0.0


def test_recovery_counts_from_the_restore_to_the_first_predicted_request():
    recs = [rec(0.5, phase=BEFORE), rec(1.5, "fallback"), rec(3.2, "fallback", phase=AFTER),
            rec(4.7, phase=AFTER), rec(5.0, phase=AFTER)]  # fmt: skip
    assert recovery_s(recs, Timeline(1.0, 3.0)) == pytest.approx(1.7)
    # a predicted answer to a request sent before the restore does not count
    recs = [rec(1.5, "fallback"), rec(2.9), rec(3.5, "fallback", phase=AFTER)]
    assert recovery_s(recs, Timeline(1.0, 3.0)) is None


def test_requests_without_an_answer_do_not_decide_recovery():
    recs = [rec(1.5, path=None, ok=False, error="x"), rec(2.0)]
    assert recovery_s(recs, Timeline(1.0, 3.0)) == 0.0


def test_sample_counts():
    recs = [rec(1, rid="a"), rec(2, rid="b"), rec(3, rid="c"), rec(4, rid="d"),
            rec(5, rid="e", ok=False), rec(6, rid=None)]  # fmt: skip
    ledger = Ledger(stream=Counter({"a": 1, "b": 1, "c": 2, "e": 1}),
                    window=Counter({"a": 1, "c": 1, "e": 1}))  # fmt: skip
    assert sample_counts(recs, ledger) == {
        "samples_expected": 4,  # ok requests with a request id
        "samples_published": 3,  # a, b, c
        "samples_trained": 2,  # a, c
        "lost_samples": 1,  # b: stored, never in the window
        "duplicate_samples": 1,  # c: stored twice
        "samples_unacknowledged": 1,  # d: never stored
    }


def test_summary_excuses_only_the_named_failures_and_judges():
    ledger = Ledger(Counter({"a": 1, "b": 1}), Counter({"a": 1, "b": 1}))
    recs = [
        rec(0.5, rid="a", phase=BEFORE, ttft_s=0.1),
        rec(1.5, rid="b", ttft_s=0.3),
        rec(1.6, ok=False, error="error_event", mid_stream=True, pod="pod-0", status=200),
        rec(1.7, ok=False, error="error_event", mid_stream=True, pod="pod-1", status=200),
    ]
    s = summarize("pod-crash-mid-stream", recs, Timeline(1.0, 2.0, 3.0), ledger,
                  allowed_failures="mid_stream_on:pod-0")  # fmt: skip
    assert s["failed_requests"] == 2 and s["failed_excused"] == 1
    assert s["failed_by_kind"] == {"error_event": 2}
    assert not s["passed"]  # the pod-1 failure is not excused
    s = summarize("x", recs[:3], Timeline(1.0, 2.0, 3.0), ledger,
                  allowed_failures="mid_stream_on:pod-0")  # fmt: skip
    assert s["passed"] and s["recovery_s"] == 0.0
    assert s["ttft_ms"]["before"]["p50"] == 100.0 and s["ttft_ms"]["during"]["p50"] == 300.0
    s = summarize("y", recs[:2], Timeline(1.0, None), Ledger(Counter({"a": 1, "b": 1}),
                  Counter({"a": 1})))  # fmt: skip
    assert s["lost_samples"] == 1 and not s["passed"]


def test_recovery_over_ten_seconds_fails():
    ledger = Ledger(Counter(), Counter())
    recs = [rec(1.5, "fallback"), rec(13.5, phase=AFTER)]
    assert not summarize("z", recs, Timeline(1.0, 3.0), ledger)["passed"]
    recs = [rec(1.5, "fallback"), rec(12.9, phase=AFTER)]
    assert summarize("z", recs, Timeline(1.0, 3.0), ledger)["passed"]


def test_percentile_matches_numpy_linear():
    import numpy as np

    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0, 50, 90, 99, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None


def test_every_scenario_the_issue_names_is_there():
    names = {s.name for s in all_scenarios()}
    assert {"predictor-kill-one", "predictor-kill-all", "predictors-frozen", "trainer-kill",
            "collector-kill", "redis-restart-empty", "nats-restart", "gateway-replica-kill",
            "pod-crash-mid-stream", "pod-hang-before-first-byte", "pod-http-500",
            "pod-malformed-sse", "pod-slow-metrics"} == names  # fmt: skip


def test_a_killed_replica_excuses_only_its_broken_connections():
    ledger = Ledger(Counter(), Counter())
    recs = [
        rec(0.9, ok=False, error="stream_ClientPayloadError", gateway=1, status=200,
            phase=BEFORE),  # in flight on replica 1 when it was killed
        rec(1.2, ok=False, error="status_502", gateway=1, status=502),  # a real failure
        rec(1.3, ok=False, error="stream_ended_early", gateway=0, status=200),
    ]  # fmt: skip
    s = summarize("g", recs, Timeline(1.0, 2.0), ledger, allowed_failures="in_flight_on_gateway:1")
    assert s["failed_requests"] == 3 and s["failed_excused"] == 1 and not s["passed"]


def test_the_stack_runs_a_profile_the_predictions_rank():
    """Prediction faults only show where the predictors are asked: the gateways run a
    profile that reads them for a plain request (the shipped headroom does not)."""
    from bench.bench_faults import FAULTS_PROFILE, stack_config
    from services.gateway.scheduling.config import load_config
    from services.gateway.scheduling.cycle import SchedulingRequest

    cfg = stack_config("nats://127.0.0.1:1", "redis://127.0.0.1:1", "ns")
    assert cfg.env["gateway"]["HEADROOM_GATEWAY_PROFILE"] == FAULTS_PROFILE
    plain = SchedulingRequest("m", 100)
    shipped = load_config(None)
    assert shipped.scheduler(FAULTS_PROFILE).reads_predictions(plain)
    assert not shipped.scheduler("headroom").reads_predictions(plain)
