"""REFERENCE section 4: after traffic, the gateway's /metrics exposes every gateway metric
name the product documentation lists, with sensible values, and passes the name lint."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_tracing_gateway import CHAT, MODEL, traced_stack
from tests.unit.test_metrics_lint import lint_exposition

REFERENCE_HISTOGRAMS = (
    "inference_objective_request_ttft_seconds",
    "inference_objective_request_predicted_ttft_seconds",
    "inference_objective_request_tpot_seconds",
    "inference_objective_request_predicted_tpot_seconds",
)
REFERENCE_COUNTERS = (
    "inference_objective_request_ttft_slo_violation_total",  # as documented
    "inference_objective_request_slo_violation_total",  # as upstream emits it, by type
)


async def test_gateway_exposes_the_reference_metrics_after_traffic(isolated):
    n = 6
    async with traced_stack(isolated, traced=False) as st:
        for i in range(n):
            # half of the requests carry SLOs no pod can meet: they count as violations
            slo = {"x-slo-ttft-ms": "0.001", "x-slo-tpot-ms": "0.001"} if i % 2 else {}
            status, headers, body = await st.post({**CHAT, "max_tokens": 6}, slo)
            assert status == 200, body
            assert headers["x-headroom-routing"] == "predicted"
        async with st.http.get(st.gateway.url + "/metrics") as r:
            assert r.status == 200
            text = await r.text()

    names, problems = lint_exposition(text)
    assert not problems, problems
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted({"model_name": MODEL, **labels}.items()))), 0.0)

    for h in REFERENCE_HISTOGRAMS:
        assert h in names, h
        count, total = value(f"{h}_count"), value(f"{h}_sum")
        assert count == n, (h, count)
        mean = total / count
        if "tpot" in h:
            assert 0.0001 < mean < 1.0, (h, mean)  # 0.1 ms .. 1 s per output token
        else:
            assert 0.0001 < mean < 10.0, (h, mean)
        assert value(f"{h}_bucket", le="+Inf") == n
    for c in REFERENCE_COUNTERS:
        assert c[: -len("_total")] in names, c
    assert value("inference_objective_request_ttft_slo_violation_total") == n // 2
    assert value("inference_objective_request_slo_violation_total", type="ttft") == n // 2
    assert value("inference_objective_request_slo_violation_total", type="tpot") == n // 2
