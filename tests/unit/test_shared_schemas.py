"""Message schemas: round trips and validation at the edge."""

from __future__ import annotations

import math

import orjson
import pytest

from shared.features import FEATURES
from shared.schemas import (
    ModelAnnouncement,
    ModelMeta,
    PodRecord,
    PodSnapshot,
    PredictReply,
    PredictRequest,
    SchemaError,
    TrainingSample,
)

ROW = [0.0] * len(FEATURES)


def sample(**kw) -> TrainingSample:
    base = dict(
        request_id="r1", pool="p", pod="pod-0", model="m", features=list(ROW), e2e_ms=120.0,
        input_tokens=200, output_tokens=16, streaming=True, ts=1.0, ttft_ms=30.0, tpot_ms=7.0,
    )  # fmt: skip
    base.update(kw)
    return TrainingSample(**base)


@pytest.mark.parametrize(
    "msg",
    [
        PredictRequest(rows=[list(ROW), list(ROW)]),
        PredictReply(status="ok", model_version="v1", ttft_ms=[1.0], tpot_ms=[2.0]),
        PredictReply(status="not_ready"),
        sample(),
        sample(ttft_ms=None, tpot_ms=None, streaming=False),
        ModelAnnouncement(version="v3", created_at=2.0),
        ModelMeta(version="v1", created_at=1.0, samples=10, feature_schema=1, targets={}),
        PodSnapshot(pool="p", ts=1.0, pods=[PodRecord(name="a", url="http://x", ready=True, scraped_at=1.0)]),
    ],
)  # fmt: skip
def test_round_trip(msg):
    assert type(msg).decode(msg.encode()) == msg


@pytest.mark.parametrize(
    ("cls", "payload", "reason"),
    [
        (PredictRequest, b"not json", "not_json"),
        (PredictRequest, b"[1, 2]", "not_object"),
        (PredictRequest, b'{"v": 2, "rows": []}', "schema_version"),
        (PredictRequest, b'{"v": 1}', "missing_field"),
        (PredictRequest, b'{"v": 1, "rows": [[1, 2]]}', "bad_row"),
        (PredictRequest, b'{"v": 1, "rows": "x"}', "bad_type"),
        (PredictRequest, b'{"v": 1, "rows": [], "feature_schema": 99}', "feature_schema"),
        (PredictReply, b'{"v": 1, "status": "maybe"}', "bad_value"),
        (PredictReply, b'{"v": 1, "status": "ok", "ttft_ms": [1], "tpot_ms": []}', "bad_row"),
        (PodSnapshot, b'{"v": 1, "pool": "p", "ts": 1, "pods": [{"name": "a"}]}', "missing_field"),
        (PodSnapshot, b'{"v": 1, "pool": "p", "ts": 1, "pods": 3}', "bad_type"),
    ],
)
def test_invalid_messages_name_the_reason(cls, payload, reason):
    with pytest.raises(SchemaError) as e:
        cls.decode(payload)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("e2e_ms", -1.0, "negative"),
        ("ttft_ms", -5.0, "negative"),
        ("e2e_ms", "fast", "bad_value"),
        ("features", [1.0], "bad_row"),
        ("input_tokens", 1.5, "bad_type"),
        ("streaming", "yes", "bad_type"),
        ("feature_schema", 7, "feature_schema"),
    ],
)
def test_training_sample_validation(field, value, reason):
    d = sample().to_dict()
    d[field] = value
    with pytest.raises(SchemaError) as e:
        TrainingSample.decode(orjson.dumps(d))
    assert e.value.reason == reason


def test_non_finite_features_are_rejected():
    d = sample().to_dict()
    d["features"] = [math.inf, *ROW[1:]]
    # orjson writes inf as null: the row then holds a non-number
    with pytest.raises(SchemaError):
        TrainingSample.decode(orjson.dumps(d))
    d = sample().to_dict()
    d["features"] = [1e400 if i == 0 else 0 for i in range(len(ROW))]
    with pytest.raises(SchemaError):
        TrainingSample.from_dict(d)


def test_pod_snapshot_ignores_unknown_pod_fields():
    raw = orjson.dumps({"v": 1, "pool": "p", "ts": 1.0, "pods": [
        {"name": "a", "url": "u", "ready": True, "scraped_at": 1.0, "future_field": 3}]})  # fmt: skip
    snap = PodSnapshot.decode(raw)
    assert snap.pods[0].name == "a"
