"""bench/bench_gateway.py's arithmetic: added latency = percentile(gateway) -
percentile(direct) over successful requests, and CPU per request with the idle background
taken out for the marginal figure."""

from __future__ import annotations

import pytest

from bench.bench_gateway import added, summarize


def rec(status: int, ttft: float | None, e2e: float | None, pod: str = "pod-0") -> dict:
    return {"status": status, "ttft": ttft, "e2e": e2e, "routing": "predicted", "pod": pod}


def test_added_latency_is_the_difference_of_percentiles_over_successes():
    direct = [rec(200, 10.0 + i, 100.0) for i in range(100)]
    via = [rec(200, 12.0 + i, 103.0) for i in range(100)] + [rec(502, None, None)]
    a = added(direct, via, "ttft")
    assert a["p50"] == pytest.approx(2.0) and a["p99"] == pytest.approx(2.0)
    assert added(direct, via, "e2e") == {"p50": 3.0, "p99": 3.0}
    assert added(direct, [rec(0, None, None)], "ttft") == {"p50": None, "p99": None}


def test_cpu_per_request_and_the_marginal_cost_without_the_idle_background():
    via = [rec(200, 1.0, 2.0, pod=f"pod-{i % 2}") for i in range(200)]
    s = summarize(via, via, cpu_s=0.5, elapsed=10.0, idle_s_per_s=0.01, user_kernel_s=(0.4, 0.1))
    assert s["requests"] == 200 and s["errors"] == {"direct": 0, "gateway": 0}
    assert s["gateway_cpu_ms_per_request"] == 2.5  # 0.5 s / 200
    assert s["gateway_cpu_s_per_s"] == 0.05
    assert s["gateway_idle_cpu_s_per_s"] == 0.01
    assert s["gateway_cpu_ms_per_request_marginal"] == 2.0  # (0.5 - 0.01 x 10) / 200
    assert s["gateway_cpu_ms_per_request_user_kernel"] == [2.0, 0.5]
    assert s["pods"] == {"pod-0": 100, "pod-1": 100} and s["routing"] == {"predicted": 200}
