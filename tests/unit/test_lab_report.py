"""The lab/replay report: latency stats, SLO attainment, goodput, prediction error."""

from __future__ import annotations

import pytest

from bench.lab.report import (
    FAILED,
    OK,
    REJECTED,
    RequestRecord,
    coverage,
    latency_stats,
    mape,
    prediction_summary,
    summarize,
)


def rec(i, arrival, first, finished, tokens, status=OK, **kw) -> RequestRecord:
    r = RequestRecord(i, arrival, 100, tokens, status=status, **kw)
    r.first_token_s, r.finished_s, r.output_tokens = first, finished, tokens
    return r


def test_latency_definitions_follow_benchmark_serving():
    r = rec(0, 1.0, 1.2, 2.2, 11)
    assert r.ttft_ms == pytest.approx(200.0)
    assert r.e2e_ms == pytest.approx(1200.0)
    assert r.tpot_ms == pytest.approx(100.0)  # (1200 - 200) / (11 - 1)
    one = rec(1, 0.0, 0.1, 0.1, 1)
    assert one.tpot_ms is None  # no TPOT for a 1-token answer


@pytest.mark.parametrize(
    ("slo_ttft", "slo_tpot", "expected"),
    [
        (None, None, True),
        (250.0, None, True),
        (150.0, None, False),
        (None, 100.5, True),
        (None, 99.0, False),
        (250.0, 100.5, True),
    ],
)
def test_meets_slo(slo_ttft, slo_tpot, expected):
    assert rec(0, 1.0, 1.2, 2.2, 11).meets(slo_ttft, slo_tpot) is expected


def test_rejected_and_failed_never_meet():
    assert not RequestRecord(0, 0.0, 1, 1, status=REJECTED).meets(None, None)
    assert not RequestRecord(0, 0.0, 1, 1, status=FAILED).meets(1e9, 1e9)


def test_latency_stats_and_empty():
    s = latency_stats([1.0, 2.0, 3.0, 4.0])
    assert s == {"mean": 2.5, "p50": 2.5, "p90": 3.7, "p99": 3.97}
    assert latency_stats([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_summarize_counts_attainment_goodput_throughput():
    records = [
        rec(0, 0.0, 0.1, 1.0, 10, path="predicted"),  # ttft 100, tpot 100
        rec(1, 1.0, 1.5, 2.0, 6, path="predicted"),  # ttft 500 misses 300
        rec(2, 2.0, 2.1, 4.0, 20, path="fallback"),  # ttft 100, tpot 100
        RequestRecord(3, 3.0, 100, 5, status=REJECTED, path="predicted"),
        RequestRecord(4, 3.5, 100, 5, status=FAILED),
    ]
    out = summarize(records, slo_ttft_ms=300.0, slo_tpot_ms=150.0)
    assert (out["requests"], out["completed"], out["rejected"], out["failed"]) == (5, 3, 1, 1)
    assert out["duration_s"] == 4.0
    assert out["slo"] == {"ttft_ms": 300.0, "tpot_ms": 150.0, "attainment": 0.4,
                          "goodput_rps": 0.5}  # fmt: skip
    assert out["throughput"] == {"requests_per_s": 0.75, "output_tokens_per_s": 9.0}
    assert out["routing"] == {"fallback": 1, "predicted": 3}
    assert out["ttft_ms"]["p50"] == 100.0
    none = summarize(records, slo_ttft_ms=None, slo_tpot_ms=None)["slo"]
    assert none == {"ttft_ms": None, "tpot_ms": None, "attainment": None, "goodput_rps": None}


def test_mape_and_coverage():
    assert mape([(110.0, 100.0), (90.0, 100.0)]) == pytest.approx(0.1)
    assert mape([(0.5, 0.0)]) == pytest.approx(0.5)  # actual floored at 1 ms
    assert mape([]) is None
    assert coverage([(10.0, 5.0), (10.0, 15.0), (10.0, 10.0), (1.0, 2.0)]) == 0.5
    assert coverage([]) is None


def test_prediction_summary_after_n_samples():
    a = rec(0, 0.0, 0.1, 1.0, 10, predicted_ttft_ms=200.0, predicted_tpot_ms=100.0)
    b = rec(1, 0.0, 0.1, 1.0, 10, predicted_ttft_ms=110.0, predicted_tpot_ms=90.0,
            trained_samples=5, p90_ttft_ms=150.0, p90_tpot_ms=50.0)  # fmt: skip
    c = rec(2, 0.0, 0.1, 1.0, 10)  # routed without predictions
    out = prediction_summary([a, b, c], after_samples=5)
    assert out["predicted_requests"] == 2 and out["requests_after"] == 1
    assert out["ttft_mape"] == pytest.approx(0.55)
    assert out["ttft_mape_after"] == pytest.approx(0.1)
    assert out["tpot_mape_after"] == pytest.approx(0.1)
    assert out["ttft_p90_coverage_after"] == 1.0 and out["tpot_p90_coverage_after"] == 0.0
