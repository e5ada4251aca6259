"""inference-perf's lifecycle report: field names, layout and metric definitions, checked on a
small case computed by hand (services/simulator/inference_perf/report.py)."""

from __future__ import annotations

import json

import pytest

from services.simulator.inference_perf.client import RequestRecord
from services.simulator.inference_perf.config import DEFAULT_PERCENTILES
from services.simulator.inference_perf.report import (
    PER_TOKEN,
    RELEASE,
    lifecycle_reports,
    summarize,
    summarize_requests,
)

# the layout of inference-perf's stage_N_lifecycle_metrics.json (the measured files' keys)
DIST_KEYS = ["mean", "min", "p0.1", "p1", "p5", "p10", "p25", "median", "p75", "p90", "p95",
             "p99", "p99.9", "max"]  # fmt: skip
STAGE_LAYOUT = {
    "load_summary": ["count", "schedule_delay", "send_duration", "requested_rate",
                     "achieved_rate"],
    "successes": ["count", "latency", "throughput", "prompt_len", "output_len"],
    "failures": ["count", "request_latency", "prompt_len"],
}  # fmt: skip
LATENCY = ["request_latency", "normalized_time_per_output_token", "time_per_output_token",
           "time_to_first_token", "inter_token_latency"]  # fmt: skip
THROUGHPUT = ["input_tokens_per_sec", "output_tokens_per_sec", "total_tokens_per_sec",
              "requests_per_sec"]  # fmt: skip
P = (0.1, 50.0, 90.0)


def records() -> list[RequestRecord]:
    r1 = RequestRecord(0, scheduled=0.0, input_tokens=10, max_tokens=3, start=0.1, end=0.5,
                       token_times=[0.3, 0.4, 0.5], output_tokens=3)  # fmt: skip
    r2 = RequestRecord(0, scheduled=1.0, input_tokens=20, max_tokens=2, start=1.0, end=1.5,
                       token_times=[1.2, 1.5], output_tokens=2)  # fmt: skip
    r3 = RequestRecord(0, scheduled=2.0, input_tokens=30, max_tokens=2, start=2.0, end=2.0,
                       error="prompt too long")  # fmt: skip
    return [r1, r2, r3]


def test_summary_statistics_are_numpy_percentiles_in_the_files_key_order():
    s = summarize([1.0, 2.0, 3.0, 4.0], P)
    assert list(s) == ["mean", "min", "p0.1", "median", "p90", "max"]
    assert s == pytest.approx({"mean": 2.5, "min": 1.0, "p0.1": 1.003, "median": 2.5,
                               "p90": 3.7, "max": 4.0})  # fmt: skip
    assert summarize([], P) is None
    assert list(summarize([1.0], DEFAULT_PERCENTILES)) == DIST_KEYS


def test_stage_report_by_hand():
    r = summarize_requests(records(), P, streaming=True, stage_rate=1.5)
    load = r["load_summary"]
    assert load["count"] == 3
    assert load["schedule_delay"]["mean"] == pytest.approx(0.1 / 3)
    assert load["send_duration"] == pytest.approx(1.9)  # max(start) - min(start)
    assert load["requested_rate"] == 1.5 and load["achieved_rate"] == pytest.approx(3 / 1.9)
    ok = r["successes"]
    assert ok["count"] == 2
    lat = ok["latency"]
    assert lat["request_latency"]["mean"] == pytest.approx(0.45)  # end - start: 0.4, 0.5
    # E2E / output tokens: 0.4 / 3, 0.5 / 2
    assert lat["normalized_time_per_output_token"]["min"] == pytest.approx(0.4 / 3)
    assert lat["normalized_time_per_output_token"]["max"] == pytest.approx(0.25)
    # the release's client: every event stamped twice, [DONE] (at the end) included
    #   r1: 0.3 0.3 0.4 0.4 0.5 0.5 0.5 0.5 -> TTFT 0.2, TPOT 0.2 / 7
    #   r2: 1.2 1.2 1.5 1.5 1.5 1.5         -> TTFT 0.2, TPOT 0.3 / 5
    assert lat["time_to_first_token"]["mean"] == pytest.approx(0.2)
    assert lat["time_per_output_token"]["min"] == pytest.approx(0.2 / 7)
    assert lat["time_per_output_token"]["max"] == pytest.approx(0.06)
    itl = lat["inter_token_latency"]  # all 7 + 5 gaps pooled: two of 0.1, one of 0.3
    assert itl["mean"] == pytest.approx(0.5 / 12)
    assert itl["median"] == 0.0 and itl["max"] == pytest.approx(0.3)
    # throughput: sums over successes / (max(end) - min(start)) over all requests
    thr = ok["throughput"]
    assert thr["input_tokens_per_sec"] == pytest.approx(30 / 1.9)
    assert thr["output_tokens_per_sec"] == pytest.approx(5 / 1.9)
    assert thr["total_tokens_per_sec"] == pytest.approx(35 / 1.9)
    assert thr["requests_per_sec"] == pytest.approx(2 / 1.9)
    assert ok["prompt_len"]["mean"] == 15 and ok["output_len"]["max"] == 3
    bad = r["failures"]
    assert bad["count"] == 1 and bad["prompt_len"]["mean"] == 30
    assert bad["request_latency"]["max"] == 0.0


def test_one_stamp_per_token_gives_the_fixed_definition():
    lat = summarize_requests(records(), P, streaming=True, clock=PER_TOKEN)["successes"]["latency"]
    assert lat["time_per_output_token"]["min"] == pytest.approx(0.1)  # (0.5 - 0.3) / 2
    assert lat["time_per_output_token"]["max"] == pytest.approx(0.3)
    assert lat["inter_token_latency"]["mean"] == pytest.approx((0.1 + 0.1 + 0.3) / 3)
    assert RELEASE.token_times(records()[1]) == [1.2, 1.2, 1.5, 1.5, 1.5, 1.5]


def test_non_streaming_has_no_token_metrics():
    lat = summarize_requests(records(), P, streaming=False)["successes"]["latency"]
    assert lat["time_to_first_token"] is None and lat["time_per_output_token"] is None
    assert lat["inter_token_latency"] is None and lat["request_latency"] is not None


def test_files_have_inference_perfs_layout():
    recs = records()
    reports = lifecycle_reports([(0, 1.5, recs[:2]), (1, 3.0, recs[2:] + recs[:1])],
                                DEFAULT_PERCENTILES, streaming=True)  # fmt: skip
    assert list(reports) == ["stage_0_lifecycle_metrics", "stage_1_lifecycle_metrics",
                             "summary_lifecycle_metrics"]  # fmt: skip
    stage = json.loads(json.dumps(reports["stage_0_lifecycle_metrics"]))
    assert {k: list(v) for k, v in stage.items()} == STAGE_LAYOUT
    assert list(stage["successes"]["latency"]) == LATENCY
    assert list(stage["successes"]["throughput"]) == THROUGHPUT
    for name in LATENCY:
        assert list(stage["successes"]["latency"][name]) == DIST_KEYS
    assert stage["failures"] == {"count": 0, "request_latency": None, "prompt_len": None}
    summary = reports["summary_lifecycle_metrics"]
    assert list(summary["load_summary"]) == ["count", "schedule_delay"]  # no stage rate
    assert summary["load_summary"]["count"] == 4
    assert summary["successes"]["count"] == 3 and summary["failures"]["count"] == 1
