"""Sample validation: every rejection has a bounded reason; plausible samples pass."""

from __future__ import annotations

import random

import orjson
import pytest

from services.trainer.validation import Limits, check, decode_sample
from shared.features import FEATURES
from shared.schemas import TrainingSample
from tests.unit.trainer_synth import synthetic_sample

NOW = 1_700_000_500.0
GOOD = synthetic_sample(random.Random(3), 1)


def variant(**changes) -> TrainingSample:
    d = GOOD.to_dict()
    features = list(d["features"])
    for name, v in changes.pop("features", {}).items():
        features[FEATURES.index(name)] = v
    d.update(changes, features=features)
    return TrainingSample.from_dict(d)


def test_good_sample_passes():
    assert check(GOOD, Limits(), NOW) is None
    assert decode_sample(GOOD.encode()) == GOOD


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"ts": 0.0}, "absurd_ts"),
        ({"ts": NOW + 7200}, "absurd_ts"),
        ({"e2e_ms": 0.0}, "absurd_e2e"),
        ({"e2e_ms": 4e6, "ttft_ms": 10.0}, "absurd_e2e"),
        ({"ttft_ms": 1e9, "e2e_ms": 1e9}, "absurd_e2e"),
        ({"ttft_ms": 5000.0, "e2e_ms": 1000.0}, "ttft_after_e2e"),
        ({"tpot_ms": 120_000.0}, "absurd_tpot"),
        ({"input_tokens": -1}, "negative"),
        ({"output_tokens": 10**9}, "absurd_tokens"),
        ({"features": {"num_request_waiting": -2.0}}, "negative"),
        ({"features": {"decode_tokens_in_flight": 1e12}}, "absurd_feature"),
        ({"features": {"num_request_running": 5e6}}, "absurd_feature"),
        ({"features": {"kv_cache_percentage": 1.5}}, "absurd_feature"),
        ({"features": {"prefix_cache_score": -0.1}}, "absurd_feature"),
        ({"features": {"is_queued": 0.5}}, "absurd_feature"),
        ({"features": {"prefix_score_bucket": 7.0}}, "absurd_feature"),
        ({"features": {"pod_type": 3.0}}, "absurd_feature"),
        ({"predicted_ttft_ms": -1.0}, "negative"),
    ],
)
def test_implausible_samples_are_rejected(changes, reason):
    assert check(variant(**changes), Limits(), NOW) == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", "not_json"),
        (GOOD.encode().replace(b'"e2e_ms":', b'"e2e_ms":NaN,"x":'), "nan"),
        (GOOD.encode().replace(b'"e2e_ms":', b'"e2e_ms":Infinity,"x":'), "nan"),
        (orjson.dumps({**GOOD.to_dict(), "v": 2}), "schema_version"),
        (orjson.dumps({**GOOD.to_dict(), "feature_schema": 99}), "feature_schema"),
        (orjson.dumps({**GOOD.to_dict(), "ttft_ms": -5.0}), "negative"),
        (orjson.dumps({**GOOD.to_dict(), "features": [1.0]}), "bad_row"),
        (orjson.dumps({"v": 1, "request_id": "x"}), "missing_field"),
    ],
)
def test_undecodable_samples_name_their_reason(data, reason):
    assert decode_sample(data) == reason
