"""SampleWindow: stratified buckets with caps (oldest out), fullest-bucket eviction, age limit,
flush, request-id de-duplication, per-target counts, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.trainer.strata import Strata
from services.trainer.window import (
    ADDED,
    DUPLICATE,
    EXPIRED,
    FLUSHED,
    N_FEATURES,
    SampleWindow,
)
from shared.features import FEATURES
from shared.schemas import TrainingSample

WAITING = FEATURES.index("num_request_waiting")
QUEUE = Strata({"num_request_waiting": [1.0, 2.0]})  # buckets: 0, 1, 2+


def sample(
    i: int,
    *,
    ttft: float | None = 100.0,
    tpot: float | None = 10.0,
    output_tokens: int = 8,
    request_id: str | None = None,
    waiting: float = 0.0,
    ts: float | None = None,
) -> TrainingSample:
    row = [float(i)] * N_FEATURES
    row[WAITING] = waiting
    return TrainingSample(
        request_id=request_id or f"req-{i}",
        pool="p",
        pod="pod-0",
        model="m",
        features=row,
        e2e_ms=500.0,
        input_tokens=100,
        output_tokens=output_tokens,
        streaming=True,
        ts=float(i) if ts is None else ts,
        ttft_ms=ttft,
        tpot_ms=tpot,
    )


def ids(w: SampleWindow) -> list[str]:
    return w.request_ids()


def test_oldest_samples_fall_out_without_strata():
    w = SampleWindow(max_size=3)
    for i in range(5):
        assert w.offer(sample(i)) == ADDED
    assert len(w) == 3
    assert ids(w) == ["req-2", "req-3", "req-4"]
    assert w.added_total == 5 and w.evicted["max_size"] == 2


def test_bucket_cap_drops_oldest_of_that_bucket_only():
    w = SampleWindow(max_size=100, strata=QUEUE, bucket_cap=2)
    w.add(sample(0, waiting=5))  # rare regime: queue 2+
    for i in range(1, 6):
        w.add(sample(i, waiting=0))  # flood of idle pods
    assert ids(w) == ["req-0", "req-4", "req-5"]
    assert w.evicted["bucket_cap"] == 3
    assert w.bucket_sizes() == {0: 2, 2: 1}


def test_window_overflow_shrinks_the_fullest_bucket():
    w = SampleWindow(max_size=4, strata=QUEUE, bucket_cap=100)
    w.add(sample(0, waiting=1))
    w.add(sample(1, waiting=5))
    for i in range(2, 8):
        w.add(sample(i, waiting=0))
    assert len(w) == 4
    assert ids(w) == ["req-0", "req-1", "req-6", "req-7"]  # rare regimes survive
    assert w.evicted["max_size"] == 4


def test_duplicate_request_id_is_ignored():
    w = SampleWindow(max_size=10)
    assert w.offer(sample(1)) == ADDED
    assert w.offer(sample(2, request_id="req-1")) == DUPLICATE
    assert len(w) == 1 and w.duplicates_total == 1 and w.added_total == 1


def test_dedup_memory_is_bounded():
    w = SampleWindow(max_size=10, dedup_size=2)
    for i in range(3):
        w.add(sample(i))
    assert not w.seen("req-0")  # forgotten: remembered ids are bounded
    assert w.seen("req-1") and w.seen("req-2")


def test_age_limit_refuses_and_expires_old_samples():
    w = SampleWindow(max_size=10, max_age_s=100.0)
    assert w.offer(sample(1, ts=50.0), now=200.0) == EXPIRED
    assert w.offer(sample(2, ts=150.0), now=200.0) == ADDED
    assert w.offer(sample(3, ts=190.0), now=200.0) == ADDED
    assert w.expire(now=260.0) == 1
    assert ids(w) == ["req-3"] and w.evicted["age"] == 1
    assert w.counts()["ttft"] == 1


def test_flush_drops_everything_and_refuses_older_samples():
    w = SampleWindow(max_size=10, strata=QUEUE)
    for i in range(4):
        w.add(sample(i, waiting=i, ts=10.0 + i))
    assert w.flush(now=20.0) == 4
    assert len(w) == 0 and w.counts() == {"ttft": 0, "tpot": 0, "e2e": 0}
    assert w.bucket_sizes() == {}
    assert w.offer(sample(9, ts=19.0)) == FLUSHED  # completed before the flush
    assert w.offer(sample(0, ts=25.0)) == DUPLICATE  # still remembered
    assert w.offer(sample(10, ts=21.0)) == ADDED
    assert w.evicted["flush"] == 4


@pytest.mark.parametrize(
    ("ttft", "tpot", "output_tokens", "counts"),
    [
        (100.0, 10.0, 8, {"ttft": 1, "tpot": 1, "e2e": 1}),
        (None, 10.0, 8, {"ttft": 0, "tpot": 1, "e2e": 1}),
        (100.0, None, 8, {"ttft": 1, "tpot": 0, "e2e": 1}),
        (100.0, 10.0, 1, {"ttft": 1, "tpot": 0, "e2e": 1}),  # tpot needs >= 2 output tokens
    ],
)
def test_counts_per_target(ttft, tpot, output_tokens, counts):
    w = SampleWindow(max_size=10)
    w.add(sample(0, ttft=ttft, tpot=tpot, output_tokens=output_tokens))
    assert w.counts() == counts
    assert w.rows().shape == (1, N_FEATURES)


def test_coverage_reports_filled_buckets():
    w = SampleWindow(max_size=10, strata=QUEUE)
    for i, q in enumerate([0, 0, 1, 7]):
        w.add(sample(i, waiting=q))
    cov = w.coverage()
    assert cov["buckets_total"] == 3 and cov["buckets_filled"] == 3
    assert cov["features"] == {"num_request_waiting": [2, 1, 1]} and cov["max_bucket"] == 2


def test_invalid_sizes():
    with pytest.raises(ValueError):
        SampleWindow(max_size=0)
    with pytest.raises(ValueError):
        SampleWindow(max_size=1, bucket_cap=0)
    with pytest.raises(ValueError):
        SampleWindow(max_size=1, max_age_s=0)


ops = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 4), st.booleans(), st.booleans()), max_size=120
)


@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 12), cap=st.integers(1, 6), items=ops)
def test_window_invariants(size, cap, items):
    def build():
        w = SampleWindow(max_size=size, dedup_size=1000, strata=QUEUE, bucket_cap=cap)
        for i, q, has_ttft, has_tpot in items:
            w.add(sample(i, waiting=q, ttft=100.0 if has_ttft else None,
                         tpot=10.0 if has_tpot else None))  # fmt: skip
        return w

    w = build()
    distinct = list(dict.fromkeys(i for i, *_ in items))
    assert len(w) <= size and all(n <= cap for n in w.bucket_sizes().values())
    assert sum(w.bucket_sizes().values()) == len(w) == len(w.snapshot())
    assert w.added_total == len(distinct)
    assert w.duplicates_total == len(items) - len(distinct)
    assert len(set(ids(w))) == len(w)  # never twice
    assert w.added_total - len(w) == sum(w.evicted.values())
    snap = w.snapshot()
    assert [e.seq for e in snap] == sorted(e.seq for e in snap)
    assert w.counts()["ttft"] == sum(e.ttft_ms is not None for e in snap)
    assert w.counts()["tpot"] == sum(e.tpot_ms is not None for e in snap)
    assert ids(build()) == ids(w)  # deterministic: a replay rebuilds the same window
