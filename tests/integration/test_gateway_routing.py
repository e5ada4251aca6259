"""Routing with real NATS: training samples on JetStream carry the exact feature row; the
fallback reasons (no predictor, not-ready predictor, slow predictor); predicted routing with a
real NATS responder picks the pod with the lowest predicted latency."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from shared.features import FEATURES, FEATURES_V1, PodLoad, build_row
from shared.schemas import PredictReply
from shared.tokenizer import count_tokens, render_chat, synth_text
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
W = FEATURES.index("num_request_waiting")
# a deadline no loaded 2-core box misses, so replies are never mistaken for timeouts (the
# timeout case uses a responder that only answers after the request is over)
PATIENT_MS = 1500.0
LOADS = {
    "pod-0": {"waiting": 0.0, "running": 2.0, "kv_usage": 0.1},
    "pod-1": {"waiting": 3.0, "running": 5.0, "kv_usage": 0.5},
}


async def test_samples_carry_the_exact_feature_row_and_prefix_affinity(isolated):
    async with gateway_stack(isolated) as st:
        await st.snapshot(loads=LOADS)
        prompt = synth_text(128, seed=1)  # exactly two 64-token prefix blocks
        n = count_tokens(prompt)
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
        status, h1, out1 = await st.post(CMPL, body)
        assert status == 200 and h1["x-headroom-pod"] == "pod-0"
        # the same prompt again: the prefix index now favours pod-0 with score 1.0
        status, h2, _ = await st.stream(CMPL, {**body, "stream": True})
        assert status == 200 and h2["x-headroom-pod"] == "pod-0"

        msgs = [{"role": "user", "content": "what is up"}]
        status, h3, out3 = await st.post(CHAT, {"model": MODEL, "messages": msgs,
                                                "max_tokens": 3})  # fmt: skip
        assert status == 200

        got = await st.samples(3)
        by_id = {s.request_id: (s, hdr) for s, hdr in got}
        s1, hdr1 = by_id[h1["x-request-id"]]
        assert hdr1["Nats-Msg-Id"] == s1.request_id
        load0 = PodLoad(waiting=0.0, running=2.0, kv_usage=0.1)
        v1 = len(FEATURES_V1)  # llm-d's columns; the v2 ones carry the pod view's estimates
        assert s1.features[:v1] == build_row(n, 0.0, load0)[:v1]
        assert s1.features[FEATURES.index("max_tokens")] == 4.0
        assert s1.features[FEATURES.index("estimate_ms")] > 0  # the cost model's prefill
        assert s1.input_tokens == n == out1["usage"]["prompt_tokens"]
        assert (s1.pod, s1.pool, s1.model, s1.streaming) == ("pod-0", "p1", MODEL, False)
        assert s1.output_tokens == 4 and s1.routing == "cost-model" and s1.model_version is None
        assert 0 < s1.ttft_ms <= s1.e2e_ms and s1.tpot_ms is not None and s1.tpot_ms > 0
        assert s1.predicted_ttft_ms is None

        s2, _ = by_id[h2["x-request-id"]]
        assert s2.features[:v1] == build_row(n, 1.0, load0)[:v1]
        assert s2.streaming is True

        s3, _ = by_id[h3["x-request-id"]]
        chat_tokens = count_tokens(render_chat(msgs))
        assert s3.input_tokens == chat_tokens == out3["usage"]["prompt_tokens"]
        assert s3.features[FEATURES.index("input_token_length")] == chat_tokens

        await wait_for(lambda: st.gw.samples.pending == 0, what="publications done")
        m = await st.metrics()
        assert metric(m, "headroom_gateway_samples_published_total") == 3
        assert metric(m, "headroom_gateway_samples_failed_total") == 0


async def test_in_flight_requests_show_up_in_the_next_rows(isolated):
    async with gateway_stack(
        isolated, n_pods=1, predict_timeout_ms=PATIENT_MS, profile="llmd-predicted"
    ) as st:  # asks for every request
        await st.snapshot(loads={"pod-0": {}})
        slow = {"model": MODEL, "prompt": synth_text(64, 3), "max_tokens": 2000, "stream": True}
        first = asyncio.create_task(st.stream(CMPL, slow))
        await wait_for(lambda: st.gw.view.total_in_flight() == 1, what="first request in flight")
        async with predictor(st, _not_ready) as seen:
            status, _, _ = await st.post(CMPL, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert status == 200
        row = seen[0][0]
        # dispatched after the last scrape: counted as waiting via unseen_requests
        assert row[W] == 1.0 and row[FEATURES.index("is_queued")] == 1.0
        in_prefill = row[FEATURES.index("prefill_tokens_in_flight")]
        in_decode = row[FEATURES.index("decode_tokens_in_flight")]
        assert (in_prefill, in_decode) in ((64.0, 0.0), (0.0, 2000.0))
        first.cancel()  # the long request's client goes away
        await asyncio.gather(first, return_exceptions=True)
        await wait_for(lambda: st.gw.view.total_in_flight() == 0, 10, "in-flight settled")


async def _not_ready(rows):
    return PredictReply(status="not_ready", replica="r1").encode()


async def test_fallback_reasons(isolated):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS,
                             profile="llmd-predicted") as st:  # fmt: skip
        await st.snapshot(loads=LOADS)
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}

        status, h, _ = await st.post(CMPL, body)
        assert status == 200 and h["x-headroom-fallback-reason"] == "no_responders"

        async with predictor(st, _not_ready) as seen:
            status, h, _ = await st.post(CMPL, body)
        assert status == 200 and h["x-headroom-routing"] == "fallback"
        assert h["x-headroom-fallback-reason"] == "no_model"
        assert (
            len(seen) == 1 and len(seen[0]) == 2 and all(len(r) == len(FEATURES) for r in seen[0])
        )

        release = asyncio.Event()

        async def slow(rows):
            await asyncio.wait_for(release.wait(), 5)
            return PredictReply(status="ok", model_version="v9", ttft_ms=[1.0] * len(rows),
                                tpot_ms=[1.0] * len(rows)).encode()  # fmt: skip

        async with predictor(st, slow):
            status, h, _ = await st.post(CMPL, body)
            release.set()
        assert status == 200 and h["x-headroom-fallback-reason"] == "timeout"

        async def garbage(rows):
            return b"{not a reply"

        async with predictor(st, garbage):
            status, h, _ = await st.post(CMPL, body)
        assert status == 200 and h["x-headroom-fallback-reason"] == "error"

        m = await st.metrics()
        for reason in ("no_responders", "no_model", "timeout", "error"):
            assert metric(m, "headroom_gateway_routing_total", path="fallback",
                          reason=reason) == 1, reason  # fmt: skip
        assert metric(m, "headroom_gateway_predict_seconds_count") == 4
        for result in ("no_responders", "no_model", "timeout", "error"):  # the transport's count
            assert metric(m, "headroom_gateway_predict_batches_total", result=result) == 1, result
        assert all(s.routing == "fallback" for s, _ in await st.samples(4))


async def test_predicted_routing_picks_the_lowest_prediction(isolated, tmp_path):
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS, profile=PREDICTED,
                             profiles_path=predicted_profiles(tmp_path)) as st:  # fmt: skip
        await st.snapshot(loads=LOADS)  # fallback would pick pod-0 (idle)

        async def predict(rows):
            # the busier pod (more waiting) is predicted faster: the prediction must win
            ttft = [100.0 - 10.0 * r[W] for r in rows]
            tpot = [10.0 for _ in rows]
            return PredictReply(status="ok", model_version="v7", ttft_ms=ttft, tpot_ms=tpot,
                                replica="r1").encode()  # fmt: skip

        async with predictor(st, predict) as seen:
            status, h, out = await st.post(CMPL, {"model": MODEL, "prompt": "hi", "max_tokens": 3})
            assert status == 200, out
            assert h["x-headroom-routing"] == "predicted"
            assert h["x-headroom-model-version"] == "v7"
            assert "x-headroom-fallback-reason" not in h
            assert h["x-headroom-pod"] == "pod-1"

            status, h, events = await st.stream(
                CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "yo"}],
                       "max_tokens": 3, "stream": True},
            )  # fmt: skip
            assert status == 200 and events[-1] == "[DONE]" and h["x-headroom-pod"] == "pod-1"

        (s1, _), (s2, _) = await st.samples(2)
        assert s1.routing == "predicted" and s1.model_version == "v7" and s1.pod == "pod-1"
        # candidates are in name order; pod-1 is row 1 (float32 on the wire)
        assert s1.features == pytest.approx(seen[0][1], rel=1e-6)
        assert s1.predicted_ttft_ms == pytest.approx(70.0) and s1.predicted_tpot_ms == 10.0
        assert s2.features == pytest.approx(seen[1][1], rel=1e-6)
        m = await st.metrics()
        assert metric(m, "headroom_gateway_routing_total", path="predicted", reason="ok") == 2
        assert metric(m, "inference_objective_request_predicted_ttft_seconds_count",
                      model_name=MODEL) == 2  # fmt: skip
        # live prediction error: rolling MAPE of the served prediction vs the measurement
        expected = abs(70.0 - s1.ttft_ms) / s1.ttft_ms + abs(70.0 - s2.ttft_ms) / s2.ttft_ms
        got = metric(m, "headroom_gateway_prediction_mape", target="ttft")
        assert got == pytest.approx(expected / 2, rel=1e-6)
        body = orjson.dumps(s1.to_dict())
        assert b"predicted" in body


async def test_headroom_asks_the_predictors_only_when_a_plugin_reads_them(isolated):
    """The default profile ranks by its cost model: a plain request is never sent to the
    predictors and says ``cost-model``; only a sheddable request with an SLO header (the
    latency-slo-admitter reads the predictions then) makes the call, and it still says
    ``cost-model`` because the cost model ranked the pods."""
    async with gateway_stack(isolated, predict_timeout_ms=PATIENT_MS) as st:
        await st.snapshot(loads=LOADS)

        async def answer(rows):
            return PredictReply(status="ok", model_version="v3", ttft_ms=[50.0] * len(rows),
                                tpot_ms=[5.0] * len(rows), replica="r1").encode()  # fmt: skip

        body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        async with predictor(st, answer) as seen:
            for headers in ({}, {"x-slo-ttft-ms": "5000"}, {"x-headroom-priority": "-1"}):
                status, h, _ = await st.post(CMPL, body, headers)
                assert status == 200 and h["x-headroom-routing"] == "cost-model", h
                assert "x-headroom-model-version" not in h
            assert seen == []
            # yet the learned damage weight has a TPOT: measured from the finished requests
            now = st.gw.clock()
            measured = [c.tpot_s for c in st.gw.view.candidates(MODEL, now) if c.tpot_s]
            assert measured and all(0 < t < 5.0 for t in measured), measured
            sheddable = {"x-slo-ttft-ms": "5000", "x-headroom-priority": "-1"}
            status, h, _ = await st.post(CMPL, body, sheddable)
            assert status == 200 and h["x-headroom-routing"] == "cost-model", h
            assert h["x-headroom-model-version"] == "v3"  # asked, read by the admitter
            assert len(seen) == 1
        m = await st.metrics()
        assert metric(m, "headroom_gateway_predict_seconds_count") == 1
        assert metric(m, "headroom_gateway_routing_total", path="cost-model", reason="ok") == 4
