"""SLO-aware scheduling through a real gateway (real NATS, real simulator pods, a NATS
responder standing in for the predictors): SLO headers change routing on both endpoints,
sheddable requests get 503 with Retry-After, invalid headers get 400, SLO violations and
plugin timings are counted, profiles can be chosen per request and per config file."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import yaml

from services.gateway.gateway import Gateway
from services.gateway.scheduling.config import DEFAULT_CONFIG_PATH
from services.gateway.scheduling.params import ConfigError
from services.gateway.settings import GatewaySettings
from shared.schemas import PredictReply
from tests.integration.gateway_harness import (
    MODEL,
    PREDICTED,
    gateway_stack,
    metric,
    predicted_profiles,
    predictor,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
PATIENT_MS = 1500.0
# both pods busy and warm, so neither the idle nor the cold exception applies
LOADS = {
    "pod-0": {"waiting": 0.0, "running": 2.0, "kv_usage": 0.3},
    "pod-1": {"waiting": 0.0, "running": 2.0, "kv_usage": 0.3},
}
# pod-0: fast first token, slow decode; pod-1: slower first token, fast decode
PRED = {0: (100.0, 40.0), 1: (300.0, 15.0)}
SLO = {"x-llm-d-slo-ttft-ms": "500", "x-llm-d-slo-tpot-ms": "20"}


async def _fixed(rows):
    return PredictReply(status="ok", model_version="v3", ttft_ms=[PRED[i][0] for i in range(len(rows))],
                        tpot_ms=[PRED[i][1] for i in range(len(rows))]).encode()  # fmt: skip


def _body(kind: str, **extra):
    if kind == "chat":
        return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                **extra}  # fmt: skip
    return {"model": MODEL, "prompt": "hi", "max_tokens": 3, **extra}


async def _post(st, path, body, headers=None):
    async with st.http.post(st.url + path, json=body, headers=headers or {}) as r:
        raw = await r.read()
        data = orjson.loads(raw) if r.content_type == "application/json" else raw
        return r.status, {k.lower(): v for k, v in r.headers.items()}, data


@pytest.mark.parametrize("kind", ["completions", "chat"])
async def test_slo_headers_change_routing(isolated, kind, tmp_path):
    path = CMPL if kind == "completions" else CHAT
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS, profile=PREDICTED,
                             profiles_path=predicted_profiles(tmp_path)) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        async with predictor(st, _fixed):
            status, h, _ = await _post(st, path, _body(kind))
            assert status == 200 and h["x-headroom-pod"] == "pod-0"
            assert h["x-headroom-routing"] == "predicted" and h["x-headroom-profile"] == PREDICTED
            status, h, _ = await _post(st, path, _body(kind), SLO)
            assert status == 200 and h["x-headroom-pod"] == "pod-1"
            # the aliases work the same way
            alias = {"x-slo-ttft-ms": "500", "x-slo-tpot-ms": "20"}
            status, h, _ = await _post(st, path, _body(kind, stream=True), alias)
            assert status == 200 and h["x-headroom-pod"] == "pod-1"
        m = await st.metrics()
        assert metric(m, "inference_objective_request_predicted_tpot_seconds_count",
                      model_name=MODEL) == 3  # fmt: skip


async def test_sheddable_request_gets_503_with_retry_after(isolated):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS, retry_after_s=3) as st:
        await st.snapshot(loads=LOADS)
        tight = {"x-llm-d-slo-ttft-ms": "50", "x-headroom-priority": "-1"}
        async with predictor(st, _fixed):
            for path, kind in ((CMPL, "completions"), (CHAT, "chat")):
                status, h, body = await _post(st, path, _body(kind), tight)
                assert status == 503 and h["retry-after"] == "3"
                err = body["error"]
                assert err["code"] == "slo_unattainable" and err["type"] == "service_unavailable"
                assert "slo_unattainable" in err["message"] and "TTFT 50 ms" in err["message"]
            # the same SLO at priority 0 is served (best effort)
            status, h, _ = await _post(
                st, CMPL, _body("completions"), {"x-llm-d-slo-ttft-ms": "50"}
            )
            assert status == 200
            # a sheddable request without SLO headers is served too
            status, _, _ = await _post(
                st, CMPL, _body("completions"), {"x-headroom-priority": "-1"}
            )
            assert status == 200
        m = await st.metrics()
        assert metric(m, "headroom_gateway_requests_shed_total", model_name=MODEL,
                      reason="slo_unattainable") == 2  # fmt: skip
        assert metric(m, "headroom_gateway_requests_total", endpoint=CMPL, status="503") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=CHAT, status="503") == 1
        assert st.gw.view.total_in_flight() == 0
        assert await st.sample_count() == 2


async def test_invalid_headers_get_400_naming_the_header(isolated):
    async with gateway_stack(isolated) as st:
        await st.snapshot(loads=LOADS)
        cases = [
            ({"x-llm-d-slo-ttft-ms": "soon"}, "x-llm-d-slo-ttft-ms"),
            ({"x-llm-d-slo-tpot-ms": "-3"}, "x-llm-d-slo-tpot-ms"),
            ({"x-slo-ttft-ms": "1e99"}, "x-slo-ttft-ms"),
            ({"x-headroom-priority": "urgent"}, "x-headroom-priority"),
            ({"x-headroom-profile": "fastest"}, "x-headroom-profile"),
        ]
        for headers, name in cases:
            for path, kind in ((CMPL, "completions"), (CHAT, "chat")):
                status, h, body = await _post(st, path, _body(kind), headers)
                assert status == 400, (headers, body)
                assert body["error"]["param"] == name and name in body["error"]["message"]
                assert "x-request-id" in h


async def test_slo_violations_are_counted(isolated, tmp_path):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS, profile=PREDICTED,
                             profiles_path=predicted_profiles(tmp_path)) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        impossible = {"x-llm-d-slo-ttft-ms": "0.001", "x-llm-d-slo-tpot-ms": "0.001"}
        generous = {"x-llm-d-slo-ttft-ms": "600000", "x-llm-d-slo-tpot-ms": "600000"}
        async with predictor(st, _fixed):
            for headers in (impossible, impossible, generous, {}):
                status, _, _ = await _post(st, CMPL, _body("completions", max_tokens=4), headers)
                assert status == 200
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, what="requests settled")
        m = await st.metrics()
        assert metric(m, "inference_objective_request_ttft_slo_violation_total",
                      model_name=MODEL) == 2  # fmt: skip
        for t in ("ttft", "tpot"):
            assert metric(m, "inference_objective_request_slo_violation_total",
                          model_name=MODEL, type=t) == 2  # fmt: skip
        assert metric(m, "inference_objective_request_ttft_seconds_count", model_name=MODEL) == 4
        assert metric(m, "inference_objective_request_tpot_seconds_count", model_name=MODEL) == 4
        assert metric(m, "inference_objective_request_predicted_ttft_seconds_count",
                      model_name=MODEL) == 4  # fmt: skip
        for kind, ptype, name in (
            ("producer", "predicted-latency-producer", "latency-producer"),
            ("admitter", "latency-slo-admitter", "latency-slo-admitter"),
            ("filter", "slo-headroom-tier-filter", "slo-headroom-tier-filter"),
            ("scorer", "latency-scorer", "most-latency-scorer"),
            ("picker", "max-score-picker", "max-score-picker"),
        ):
            assert metric(m, "headroom_gateway_scheduler_plugin_duration_seconds_count",
                          kind=kind, plugin_type=ptype, plugin_name=name) == 4  # fmt: skip
        assert metric(m, "headroom_gateway_scheduler_duration_seconds_count",
                      profile=PREDICTED) == 4  # fmt: skip


async def test_running_tpot_slo_steers_later_requests_away(isolated, tmp_path):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS, profile=PREDICTED,
                             profiles_path=predicted_profiles(tmp_path)) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)

        async def same(rows):  # identical pods except that pod-0 looks a bit faster
            return PredictReply(status="ok", model_version="v1", ttft_ms=[100.0, 120.0][:len(rows)],
                                tpot_ms=[10.0] * len(rows)).encode()  # fmt: skip

        async with predictor(st, same):
            long = _body("completions", max_tokens=2000, stream=True)
            first = asyncio.create_task(_long(st, long))
            await wait_for(lambda: st.gw.view.in_flight("pod-0")[0] == 1, what="long in flight")
            # no SLO of its own, but pod-0 runs a request whose 5 ms TPOT SLO it would break
            status, h, _ = await _post(st, CMPL, _body("completions"))
            assert status == 200 and h["x-headroom-pod"] == "pod-1"
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, 10, "in-flight settled")


async def _long(st, body):
    async with st.http.post(st.url + CMPL, json=body, headers={"x-llm-d-slo-tpot-ms": "5"}) as r:
        assert r.headers["x-headroom-pod"] == "pod-0"
        async for _ in r.content:
            pass


async def test_profile_header_and_profile_setting(isolated):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS) as st:
        await st.snapshot(loads=LOADS)
        async with predictor(st, _fixed) as seen:
            pods = []
            for _ in range(4):
                status, h, _ = await _post(st, CMPL, _body("completions"),
                                           {"x-headroom-profile": "round-robin"})  # fmt: skip
                assert status == 200 and h["x-headroom-routing"] == "heuristic"
                assert h["x-headroom-profile"] == "round-robin"
                assert "x-headroom-fallback-reason" not in h
                pods.append(h["x-headroom-pod"])
            assert pods == ["pod-0", "pod-1", "pod-0", "pod-1"]
            assert seen == []  # heuristic profiles never ask the predictors
        m = await st.metrics()
        assert metric(m, "headroom_gateway_routing_total", path="heuristic", reason="ok") == 4
    async with gateway_stack(isolated, profile="gie-default", privileged_headers="ignore") as st:
        await st.snapshot(loads=LOADS)
        status, h, _ = await _post(st, CMPL, _body("completions"),
                                   {"x-headroom-profile": "nonexistent"})  # fmt: skip
        assert status == 200 and h["x-headroom-profile"] == "gie-default"


async def test_objective_priority_from_the_config_file(isolated, tmp_path):
    doc = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    doc["objectives"] = {"*": {"priority": 0}, MODEL: {"priority": -1}}
    path = tmp_path / "profiles.yaml"
    path.write_text(yaml.safe_dump(doc))
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS,
                             profiles_path=str(path)) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        tight = {"x-llm-d-slo-ttft-ms": "50"}
        async with predictor(st, _fixed):
            status, _, body = await _post(st, CMPL, _body("completions"), tight)
            assert status == 503 and body["error"]["code"] == "slo_unattainable"
            # the header overrides the objective's priority
            status, _, _ = await _post(st, CMPL, _body("completions"),
                                       {**tight, "x-headroom-priority": "0"})  # fmt: skip
            assert status == 200


def test_bad_config_fails_gateway_construction(tmp_path):
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        Gateway(GatewaySettings(profile="nope"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"plugins": [{"type": "queue-scorer", "parameters": {"x": 1}}],
                                   "profiles": []}))  # fmt: skip
    with pytest.raises(ConfigError, match="plugin 'queue-scorer': unknown parameter 'x'"):
        Gateway(GatewaySettings(profiles_path=str(bad)))
