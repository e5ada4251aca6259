"""Strata: bucket numbers of feature rows, coverage, strict configuration."""

from __future__ import annotations

import pytest

from services.trainer.strata import DEFAULT_STRATA, Strata
from shared.features import FEATURES, PodLoad, build_row


def test_default_strata_have_2000_buckets():
    s = Strata()
    assert [x.feature for x in s.strata] == list(DEFAULT_STRATA)
    assert s.total == 5 * 20 * 4 * 5


@pytest.mark.parametrize(
    ("waiting", "kv", "prefix", "tokens", "position"),
    [
        (0, 0.0, 0.0, 10, (0, 0, 0, 0)),
        (1, 0.05, 0.25, 256, (1, 1, 1, 1)),
        (3, 0.52, 0.5, 1000, (2, 10, 2, 1)),
        (8, 1.0, 1.0, 20000, (4, 19, 3, 4)),
    ],
)
def test_bucket_positions(waiting, kv, prefix, tokens, position):
    s = Strata()
    row = build_row(tokens, prefix, PodLoad(waiting=waiting, running=0, kv_usage=kv))
    key = s.key(row)
    assert 0 <= key < s.total
    assert s.position(key) == position


def test_keys_are_distinct_per_position():
    s = Strata({"num_request_waiting": [1, 2], "prefix_score_bucket": [1, 2, 3]})
    seen = set()
    for q in range(3):
        for b in range(4):
            row = [0.0] * len(FEATURES)
            row[FEATURES.index("num_request_waiting")] = q
            row[FEATURES.index("prefix_score_bucket")] = b
            seen.add(s.key(row))
            assert s.position(s.key(row)) == (q, b)
    assert seen == set(range(12))


def test_coverage_and_describe():
    s = Strata({"num_request_waiting": [1.0]})
    assert s.coverage({0: 3, 1: 0}) == {
        "buckets_total": 2,
        "buckets_filled": 1,
        "max_bucket": 3,
        "features": {"num_request_waiting": [3, 0]},
    }
    assert s.describe() == {"num_request_waiting": [1.0]}
    assert Strata({}).total == 1 and Strata({}).key([0.0] * len(FEATURES)) == 0


@pytest.mark.parametrize(
    "spec",
    [{"nope": [1.0]}, {"num_request_waiting": [2.0, 1.0]}, {"kv_cache_percentage": [0.5, 0.5]}],
)
def test_invalid_strata(spec):
    with pytest.raises(ValueError):
        Strata(spec)
