"""Message.encode gives exactly ``orjson.dumps(to_dict())`` for every message type (the fast
dataclass path and the overridden layouts)."""

from __future__ import annotations

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
    TrainingSample,
)

N = len(FEATURES)

EXAMPLES = [
    PredictRequest(rows=[[1.0, 2.5, *[0.0] * (N - 2)], [0.1, 1e-9, *[3.0] * (N - 2)]]),
    PredictReply(status="ok", model_version="v3", ttft_ms=[1.5], tpot_ms=[2.25], replica="r"),
    TrainingSample(
        request_id="r1",
        pool="p",
        pod="pod-1",
        model="m",
        features=[0.0, 1.5, 1e300, *[2.0] * (N - 3)],
        e2e_ms=12.5,
        input_tokens=100,
        output_tokens=32,
        streaming=True,
        ts=1.7e9,
        ttft_ms=None,
        tpot_ms=7.125,
        routing="predicted",
        model_version=None,
    ),
    ModelAnnouncement(version="v2", created_at=1.5),
    ModelMeta(
        version="v1",
        created_at=2.0,
        samples=10,
        feature_schema=1,
        targets={"ttft": {"sha256": "x", "columns": [0, 1]}},
        metrics={"ttft": {"mape": 0.1}},
    ),
    PodRecord(name="a", url="http://x", ready=True, scraped_at=1.0, models=["m"], error="é"),
    PodSnapshot(pool="p", ts=1.0, pods=[PodRecord(name="a", url="u", ready=False, scraped_at=0)]),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_encode_is_the_dict_encoding(msg):
    assert msg.encode() == orjson.dumps(msg.to_dict())
    if not isinstance(msg, PodRecord):  # records travel inside snapshots only
        assert type(msg).decode(msg.encode()) == msg
