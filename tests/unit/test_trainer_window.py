"""SampleWindow: bounds (oldest out), request-id de-duplication, per-target arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.trainer.window import N_FEATURES, SampleWindow
from shared.schemas import TrainingSample


def sample(
    i: int,
    *,
    ttft: float | None = 100.0,
    tpot: float | None = 10.0,
    output_tokens: int = 8,
    request_id: str | None = None,
) -> TrainingSample:
    return TrainingSample(
        request_id=request_id or f"req-{i}",
        pool="p",
        pod="pod-0",
        model="m",
        features=[float(i)] * N_FEATURES,
        e2e_ms=500.0,
        input_tokens=100,
        output_tokens=output_tokens,
        streaming=True,
        ts=float(i),
        ttft_ms=ttft,
        tpot_ms=tpot,
    )


def test_oldest_samples_fall_out():
    w = SampleWindow(max_size=3)
    for i in range(5):
        assert w.add(sample(i))
    assert len(w) == 3
    assert w.rows()[:, 0].tolist() == [2.0, 3.0, 4.0]
    assert w.added_total == 5


def test_duplicate_request_id_is_ignored():
    w = SampleWindow(max_size=10)
    assert w.add(sample(1))
    assert not w.add(sample(2, request_id="req-1"))
    assert len(w) == 1
    assert w.duplicates_total == 1
    assert w.added_total == 1


def test_dedup_memory_is_bounded():
    w = SampleWindow(max_size=10, dedup_size=2)
    for i in range(3):
        w.add(sample(i))
    assert not w.seen("req-0")  # forgotten: remembered ids are bounded
    assert w.seen("req-1") and w.seen("req-2")
    assert w.add(sample(0))


@pytest.mark.parametrize(
    ("ttft", "tpot", "output_tokens", "in_ttft", "in_tpot"),
    [
        (100.0, 10.0, 8, True, True),
        (None, 10.0, 8, False, True),
        (100.0, None, 8, True, False),
        (100.0, 10.0, 1, True, False),  # tpot needs >= 2 output tokens
        (None, None, 0, False, False),
    ],
)
def test_target_arrays_pick_labelled_samples(ttft, tpot, output_tokens, in_ttft, in_tpot):
    w = SampleWindow(max_size=10)
    w.add(sample(0, ttft=ttft, tpot=tpot, output_tokens=output_tokens))
    w.add(sample(1, ttft=50.0, tpot=5.0))
    arrays = w.target_arrays()
    x_ttft, y_ttft = arrays["ttft"]
    x_tpot, y_tpot = arrays["tpot"]
    assert x_ttft.shape == (1 + in_ttft, N_FEATURES)
    assert x_tpot.shape == (1 + in_tpot, N_FEATURES)
    assert y_ttft[-1] == 50.0 and y_tpot[-1] == 5.0
    assert w.counts() == {"ttft": 1 + in_ttft, "tpot": 1 + in_tpot}
    assert w.rows().shape == (2, N_FEATURES)


def test_empty_window_arrays_have_the_right_shape():
    w = SampleWindow(max_size=4)
    assert w.rows().shape == (0, N_FEATURES)
    for x, y in w.target_arrays().values():
        assert x.shape == (0, N_FEATURES) and y.shape == (0,)


def test_invalid_size():
    with pytest.raises(ValueError):
        SampleWindow(max_size=0)


@given(
    size=st.integers(1, 20),
    items=st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.booleans()), max_size=80),
)
def test_window_invariants(size, items):
    w = SampleWindow(max_size=size, dedup_size=1000)
    for i, has_ttft, has_tpot in items:
        w.add(sample(i, ttft=100.0 if has_ttft else None, tpot=10.0 if has_tpot else None))
    distinct = list(dict.fromkeys(i for i, _, _ in items))
    assert len(w) == min(size, len(distinct))
    assert w.added_total == len(distinct)
    assert w.duplicates_total == len(items) - len(distinct)
    expected = distinct[-size:] if distinct else []
    assert w.rows()[:, 0].astype(int).tolist() == expected
    arrays = w.target_arrays()
    assert w.counts() == {name: len(y) for name, (_, y) in arrays.items()}
    assert np.all(arrays["ttft"][1] == 100.0) and np.all(arrays["tpot"][1] == 10.0)
    assert len(w.snapshot()) == len(w)
