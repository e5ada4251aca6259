"""The binary wire format and the coalescing client against a real predictor on real NATS:
malformed messages get error replies (the predictor keeps serving), coalesced calls are
sliced back correctly, JSON stays accepted, fallback reasons."""

from __future__ import annotations

import asyncio

import numpy as np

from services.gateway.coalescer import CoalescerConfig
from services.gateway.predictor_client import PredictorClient
from services.predictor.service import PredictorService
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared import wire
from shared.bus import connect_nats, connect_redis
from shared.features import FEATURES
from shared.latency_model import LatencyModel
from shared.model_store import next_version, publish_version
from shared.subjects import Names
from tests.integration.nats_routing import until_routed
from tests.integration.trainer_harness import eventually, metric, predictor_settings
from tests.unit.trainer_synth import synthetic_samples, synthetic_window

N = len(FEATURES)
X = synthetic_window(120, seed=4).rows()


async def publish(isolated) -> LatencyModel:
    names: Names = isolated["names"]
    cfg = FitConfig(rounds=20)
    data = TrainingData.from_samples(synthetic_samples(60, seed=2, prefix="w-"))
    r = connect_redis(isolated["redis_url"])
    try:
        version = await next_version(r, names)
        meta, blobs = build_meta(version, 1.0, run_cycle(data, None, cfg), cfg)
        await publish_version(r, names, meta, blobs)
    finally:
        await r.aclose()
    return LatencyModel.from_blobs(meta, blobs)


async def test_malformed_binary_messages_get_error_replies(isolated):
    names: Names = isolated["names"]
    model = await publish(isolated)
    p = PredictorService(predictor_settings(isolated, "w1"))
    await p.start()
    nc = await connect_nats(isolated["nats_url"], "test")
    try:
        await eventually(lambda: p.slot.version == model.version)
        good = wire.encode_request(X[:4])
        bad = [
            wire.MAGIC,  # truncated
            good[:-1],  # length mismatch
            b"HRWX" + good[4:],  # not the magic, not JSON either: error reply in JSON
            wire.encode_request(np.full((2, N), np.inf)),  # non-finite
            good[:5] + b"\x07" + good[6:],  # unknown kind
        ]
        for data in bad:
            msg = await nc.request(names.predict, data, timeout=5.0)
            if wire.is_wire(data):
                reply = wire.decode_reply(msg.data)
                assert reply.status == "error" and reply.replica == "w1", data
            else:
                assert msg.data.startswith(b"{") and b'"error"' in msg.data
        for reason in ("truncated", "bad_length", "bad_value", "bad_kind", "not_json"):
            assert metric(p, "headroom_predictor_request_errors_total", reason=reason) == 1, reason
        # still serving
        msg = await nc.request(names.predict, good, timeout=5.0)
        reply = wire.decode_reply(msg.data)
        assert reply.status == "ok" and len(reply.ttft_ms) == 4
    finally:
        await nc.close()
        await p.stop()


async def test_coalesced_calls_are_sliced_back_and_json_still_works(isolated):
    names: Names = isolated["names"]
    model = await publish(isolated)
    p = PredictorService(predictor_settings(isolated, "w2"))
    await p.start()
    nc = await connect_nats(isolated["nats_url"], "test")
    try:
        await eventually(lambda: p.slot.version == model.version)
        for fmt in ("binary", "json"):
            client = PredictorClient(
                nc, names.predict, 5.0, coalescer=CoalescerConfig(window_s=0.005), wire_format=fmt
            )
            sizes = [(i * 7) % 13 + 1 for i in range(40)]
            starts = np.cumsum([0, *sizes[:-1]]) % (len(X) - 13)
            calls = [X[s : s + n] for s, n in zip(starts, sizes, strict=True)]
            outs = await asyncio.gather(*(client.predict(c.tolist()) for c in calls))
            for c, out in zip(calls, outs, strict=True):
                assert out.reason is None and out.model_version == model.version, fmt
                # binary replies carry float32, JSON replies the predictor's float64
                dtype = np.float32 if fmt == "binary" else np.float64
                want_ttft = model.predict_key("ttft", c).astype(dtype)
                want_tpot = model.predict_key("tpot", c).astype(dtype)
                assert [q.ttft_ms for q in out.predictions] == want_ttft.tolist()
                assert [q.tpot_ms for q in out.predictions] == want_tpot.tolist()
            st = client.coalescer.stats
            assert st.calls == 40 and 1 <= st.batches <= 40
    finally:
        await nc.close()
        await p.stop()


async def test_client_fallback_reasons(isolated):
    names: Names = isolated["names"]
    nc = await connect_nats(isolated["nats_url"], "test")
    client = PredictorClient(nc, names.predict, 2.0)
    try:
        assert (await client.predict(X[:2].tolist())).reason == "no_responders"

        p = PredictorService(predictor_settings(isolated, "w3"))
        await p.start()
        await until_routed(nc, names.predict)
        try:
            out = await client.predict(X[:2].tolist())
            assert out.reason == "no_model" and out.replica == "w3"
        finally:
            await p.stop()

        async def silent(msg):  # answers nothing
            return None

        sub = await nc.subscribe(names.predict, queue=names.predict_queue, cb=silent)
        await nc.flush()
        out = await client.predict(X[:2].tolist(), timeout_s=0.1)
        assert out.reason == "timeout"
        await sub.unsubscribe()

        async def garbage(msg):
            await msg.respond(wire.MAGIC + b"\x01\x02")

        sub = await nc.subscribe(names.predict, queue=names.predict_queue, cb=garbage)
        await nc.flush()
        assert (await client.predict(X[:2].tolist())).reason == "error"
        await sub.unsubscribe()
    finally:
        await client.close()
        await nc.close()
