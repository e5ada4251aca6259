"""`headroom replay` against a real gateway with real simulator pods (real NATS through the
`isolated` fixture): streamed and non-streamed replays, SLO headers, failures, loopback only."""

from __future__ import annotations

import pytest

from bench.lab.report import FAILED, OK
from bench.lab.synthetic import write_azure_trace, write_mooncake_trace
from bench.replay import Replayer, check_loopback, report
from bench.traces import read_trace
from tests.integration.gateway_harness import gateway_stack

pytestmark = pytest.mark.timeout(60)

ARGS = {"rate_scale": 4.0, "seed": 0, "limit": 12, "offset": 0, "pods": 2, "profile": "h100"}


async def test_streaming_replay_reports_like_the_lab(isolated, tmp_path):
    path = write_mooncake_trace(tmp_path / "m.jsonl", 12, rate_rps=4.0, output=(4, 30))
    trace = read_trace(path, rate_scale=4.0)
    async with gateway_stack(isolated) as st:
        await st.snapshot()
        rp = Replayer(st.url, trace, streaming=True, slo_ttft_ms=5000, slo_tpot_ms=1000,
                      max_duration_s=40)  # fmt: skip
        seen: list[int] = []
        await rp.run(seen.append)
        out = report(rp, trace, ARGS, 1.0)
    assert seen[-1] == 12
    assert all(r.status == OK for r in rp.records), [r.error for r in rp.records]
    for r, req in zip(rp.records, trace.requests, strict=True):
        assert r.output_tokens == req.output_tokens and r.pod in ("pod-0", "pod-1")
        assert 0 < r.ttft_ms <= r.e2e_ms and r.tpot_ms is not None and r.tpot_ms > 0
    assert (out["requests"], out["completed"], out["rejected"], out["failed"]) == (12, 12, 0, 0)
    assert out["slo"]["attainment"] is not None and out["streaming"] is True
    assert sum(out["routing"].values()) == 12  # x-headroom-routing header of every reply
    assert out["prediction"]["fallback_decisions"] == out["routing"].get("fallback", 0)
    assert set(out) >= {"ttft_ms", "tpot_ms", "e2e_ms", "throughput", "prefix_cache_hit_rate"}


async def test_non_streaming_replay_and_failures(isolated, tmp_path):
    path = write_azure_trace(tmp_path / "a.csv", 6, rate_rps=6.0, context=(50, 400),
                             output=(1, 8))  # fmt: skip
    trace = read_trace(path)
    async with gateway_stack(isolated) as st:
        await st.snapshot()
        rp = Replayer(st.url, trace, streaming=False, max_duration_s=30)
        await rp.run()
        assert all(r.status == OK and r.ttft_ms == r.e2e_ms for r in rp.records)
        assert [r.output_tokens for r in rp.records] == [q.output_tokens for q in trace]
        bad = Replayer(st.url, trace, model="no-such-model", streaming=True, max_duration_s=30)
        await bad.run()
        assert all(r.status == FAILED and "HTTP 404" in r.error for r in bad.records)
        assert report(bad, trace, ARGS, 1.0)["failed"] == 6


def test_only_loopback_targets():
    assert check_loopback("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    assert check_loopback("http://localhost:1") == "http://localhost:1"
    for url in ("http://10.0.0.1:8080", "http://example.com", "ftp://127.0.0.1"):
        with pytest.raises(ValueError, match="loopback"):
            check_loopback(url)
