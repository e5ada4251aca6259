"""PredictHandler and ModelSlot, driven without NATS."""

from __future__ import annotations

import orjson
import pytest

from services.predictor.core import ModelSlot, PredictHandler, check_servable
from services.predictor.metrics import PredictorMetrics
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared.features import FEATURES
from shared.latency_model import LatencyModel
from shared.schemas import PredictReply, PredictRequest, SchemaError
from tests.unit.trainer_synth import synthetic_window

N = len(FEATURES)


@pytest.fixture(scope="module")
def window():
    return synthetic_window(200)


def make_model(window, version: str, rounds: int = 10, objective: str = "mean") -> LatencyModel:
    cfg = FitConfig(rounds=rounds, objective=objective)
    result = run_cycle(TrainingData.from_entries(window.snapshot()), None, cfg)
    meta, blobs = build_meta(version, 1.0, result, cfg)
    return LatencyModel.from_blobs(meta, blobs)


@pytest.fixture(scope="module")
def model(window):
    return make_model(window, "v1")


def sample_value(metrics: PredictorMetrics, name: str, **labels) -> float:
    v = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if v is None else v


async def ask(handler: PredictHandler, payload) -> PredictReply:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return PredictReply.decode(await handler.handle(data))


async def test_not_ready_before_a_model():
    metrics = PredictorMetrics()
    h = PredictHandler(ModelSlot(), metrics, "r1")
    reply = await ask(h, PredictRequest(rows=[[0.0] * N]).encode())
    assert reply.status == "not_ready" and reply.replica == "r1"
    assert sample_value(metrics, "headroom_predictor_requests_total", status="not_ready") == 1


async def test_ok_predicts_every_row_with_the_version(model, window):
    metrics = PredictorMetrics()
    slot = ModelSlot()
    slot.swap(model)
    h = PredictHandler(slot, metrics, "r1")
    rows = window.rows()[:50].tolist()
    reply = await ask(h, PredictRequest(rows=rows).encode())
    assert reply.status == "ok" and reply.model_version == "v1"
    assert len(reply.ttft_ms) == len(reply.tpot_ms) == 50
    assert all(v >= 0 for v in reply.ttft_ms + reply.tpot_ms)
    assert sample_value(metrics, "headroom_predictor_rows_total") == 50
    assert sample_value(metrics, "headroom_predictor_predict_seconds_count") == 1
    assert sample_value(metrics, "headroom_predictor_requests_total", status="ok") == 1


async def test_large_batch_runs_off_the_loop_and_matches_inline(model, window):
    slot = ModelSlot()
    slot.swap(model)
    rows = window.rows().tolist()
    inline = await ask(PredictHandler(slot, PredictorMetrics(), "r"), {"v": 1, "rows": rows})
    threaded = await ask(
        PredictHandler(slot, PredictorMetrics(), "r", inline_max_rows=10), {"v": 1, "rows": rows}
    )
    assert threaded.status == "ok" and threaded.ttft_ms == inline.ttft_ms


async def test_empty_rows_is_ok(model):
    slot = ModelSlot()
    slot.swap(model)
    reply = await ask(PredictHandler(slot, PredictorMetrics(), "r"), {"v": 1, "rows": []})
    assert reply.status == "ok" and reply.ttft_ms == [] and reply.tpot_ms == []


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "not_json"),
        ([1, 2], "not_object"),
        ({"v": 2, "rows": []}, "schema_version"),
        ({"v": 1}, "missing_field"),
        ({"v": 1, "rows": [[1.0, 2.0]]}, "bad_row"),
        ({"v": 1, "rows": [[0.0] * N], "feature_schema": 9}, "feature_schema"),
        ({"v": 1, "rows": "x"}, "bad_type"),
        ({"v": 1, "rows": [[0.0] * (N - 1) + ["a"]]}, "bad_value"),
    ],
)
async def test_bad_requests_get_error_replies_counted_by_reason(model, payload, reason):
    metrics = PredictorMetrics()
    slot = ModelSlot()
    slot.swap(model)
    reply = await ask(PredictHandler(slot, metrics, "r1"), payload)
    assert reply.status == "error" and reply.error and reply.replica == "r1"
    assert sample_value(metrics, "headroom_predictor_request_errors_total", reason=reason) == 1
    assert sample_value(metrics, "headroom_predictor_requests_total", status="error") == 1


async def test_swap_changes_the_version_atomically(model, window):
    slot = ModelSlot()
    assert slot.version is None
    assert slot.swap(model) is None
    other = make_model(window, "v2", rounds=3)
    assert slot.swap(other) is model
    assert slot.version == "v2"
    reply = await ask(PredictHandler(slot, PredictorMetrics(), "r"), {"v": 1, "rows": [[1.0] * N]})
    assert reply.model_version == "v2"


def test_a_model_without_tpot_is_not_servable(model):
    partial = LatencyModel(version="v9", boosters={"ttft": model.boosters["ttft"]})
    with pytest.raises(SchemaError) as e:
        check_servable(partial)
    assert e.value.reason == "missing_target"
    check_servable(model)


def test_a_model_whose_columns_do_not_fit_is_not_servable(model):
    bad = LatencyModel(
        version="v9", boosters=model.boosters, columns={"ttft": (0, 1), "tpot": (0,)}
    )
    with pytest.raises(SchemaError) as e:
        check_servable(bad)
    assert e.value.reason == "unservable"


async def test_served_objective_is_chosen_per_replica(window):
    both = make_model(window, "v4", rounds=20, objective="both")
    slot = ModelSlot()
    slot.swap(both)
    rows = window.rows()[:20].tolist()
    mean = await ask(PredictHandler(slot, PredictorMetrics(), "r"), {"v": 1, "rows": rows})
    p90 = await ask(
        PredictHandler(slot, PredictorMetrics(), "r", prefer="quantile"), {"v": 1, "rows": rows}
    )
    assert mean.model_version == p90.model_version == "v4"
    assert mean.ttft_ms == both.predict_key("ttft", window.rows()[:20]).tolist()
    assert p90.ttft_ms == both.predict_key("ttft_p90", window.rows()[:20]).tolist()
    assert p90.ttft_ms != mean.ttft_ms


def test_a_quantile_only_model_serves_either_preference(window):
    q = make_model(window, "v5", rounds=5, objective="quantile")
    assert set(q.boosters) == {"ttft_p90", "tpot_p90"}
    check_servable(q, "mean")  # falls back to what the version has
    check_servable(q, "quantile")
