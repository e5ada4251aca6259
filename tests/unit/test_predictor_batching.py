"""PredictHandler on the binary wire format and batches of queued requests; the direct
inference path gives exactly XGBoost's inplace_predict results."""

from __future__ import annotations

import numpy as np
import pytest

from services.predictor.core import ModelSlot, PredictHandler
from services.predictor.inference import CompiledModel
from services.predictor.metrics import PredictorMetrics
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared import wire
from shared.features import FEATURES
from shared.latency_model import LatencyModel
from shared.schemas import PredictReply, PredictRequest
from tests.unit.trainer_synth import synthetic_window

N = len(FEATURES)
LOSS = {"log": "relative", "none": "squared"}  # the relative loss needs the log transform


@pytest.fixture(scope="module")
def window():
    return synthetic_window(300, seed=3)


@pytest.fixture(scope="module")
def model(window) -> LatencyModel:
    cfg = FitConfig(rounds=30)
    meta, blobs = build_meta(
        "v1", 1.0, run_cycle(TrainingData.from_entries(window.snapshot()), None, cfg), cfg
    )
    return LatencyModel.from_blobs(meta, blobs)


def handler(model=None, metrics=None) -> PredictHandler:
    slot = ModelSlot()
    if model is not None:
        slot.swap(model)
    return PredictHandler(slot, metrics or PredictorMetrics(), "r1")


def value(metrics: PredictorMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels or None) or 0.0


@pytest.mark.parametrize("transform", ["log", "none"])
def test_direct_inference_is_identical_to_inplace_predict(window, transform):
    cfg = FitConfig(rounds=30, transform=transform, point_loss=LOSS[transform])
    data = TrainingData.from_entries(window.snapshot())
    model = LatencyModel.from_blobs(*build_meta("v1", 1.0, run_cycle(data, None, cfg), cfg))
    assert model.spec("ttft").transform == transform
    c = CompiledModel(model)
    assert c.direct  # this XGBoost exposes the C entry point
    rng = np.random.default_rng(1)
    x = np.concatenate([window.rows(), window.rows() * rng.uniform(0.5, 2.0, window.rows().shape)])
    ttft, tpot = c.predict(x.astype(np.float32))
    assert np.array_equal(ttft, model.predict_key("ttft", x))
    assert np.array_equal(tpot, model.predict_key("tpot", x))
    assert [len(a) for a in c.predict(np.zeros((0, N), np.float32))] == [0, 0]


async def test_binary_request_gets_a_binary_reply(model, window):
    h = handler(model)
    x = window.rows()[:40]
    r = wire.decode_reply(await h.handle(wire.encode_request(x)))
    assert r.status == "ok" and r.model_version == "v1" and r.replica == "r1"
    assert np.array_equal(r.ttft_ms, model.predict_key("ttft", x).astype(np.float32))
    assert np.array_equal(r.tpot_ms, model.predict_key("tpot", x).astype(np.float32))


async def test_not_ready_in_binary():
    r = wire.decode_reply(await handler().handle(wire.encode_request(np.zeros((1, N)))))
    assert r.status == "not_ready" and r.replica == "r1"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (wire.MAGIC + b"\x01", "truncated"),
        (wire.encode_request(np.zeros((2, N)))[:-3], "bad_length"),
        (wire.encode_request(np.full((1, N), np.nan)), "bad_value"),
        (wire.encode_reply("ok", [1.0], [1.0]), "bad_kind"),
    ],
)
async def test_malformed_binary_requests_get_binary_error_replies(model, data, reason):
    metrics = PredictorMetrics()
    r = wire.decode_reply(await handler(model, metrics).handle(data))
    assert r.status == "error" and r.error and r.replica == "r1"
    assert value(metrics, "headroom_predictor_request_errors_total", reason=reason) == 1
    assert value(metrics, "headroom_predictor_requests_total", status="error") == 1


def test_one_call_answers_a_batch_of_mixed_requests(model, window):
    metrics = PredictorMetrics()
    h = handler(model, metrics)
    x = window.rows()
    parts = [x[0:5], x[5:6], x[6:30], x[30:30]]
    jobs = [
        h.decode(wire.encode_request(parts[0], dtype=np.float64)),
        h.decode(PredictRequest(rows=parts[1].tolist()).encode()),
        h.decode(b"garbage"),
        h.decode(wire.encode_request(parts[2])),
        h.decode(wire.encode_request(parts[3])),
    ]
    replies = h.run_batch(jobs)
    assert value(metrics, "headroom_predictor_predict_seconds_count") == 1  # one call
    assert value(metrics, "headroom_predictor_rows_total") == 30
    r0, r3, r4 = (wire.decode_reply(replies[i]) for i in (0, 3, 4))
    j1 = PredictReply.decode(replies[1])
    assert PredictReply.decode(replies[2]).status == "error"
    for got, part in (
        (r0.ttft_ms, parts[0]),
        (np.array(j1.ttft_ms), parts[1]),
        (r3.ttft_ms, parts[2]),
    ):
        assert np.array_equal(got, model.predict_key("ttft", part).astype(got.dtype))
    assert r4.status == "ok" and len(r4.ttft_ms) == 0


def test_a_batch_without_a_model_is_not_ready(window):
    h = handler()
    replies = h.run_batch([h.decode(wire.encode_request(window.rows()[:3])) for _ in range(3)])
    assert [wire.decode_reply(r).status for r in replies] == ["not_ready"] * 3
