"""Prefix index, composite fallback score, picker and candidate rows."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway.scheduling.fallback import composite_scores
from services.gateway.scheduling.picker import Prediction, latency_scores, minmax, rank
from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import build_candidate_rows
from shared.features import PodLoad, build_row
from shared.schemas import PodRecord, PodSnapshot
from shared.tokenizer import block_hashes


def toks(n, start=0):
    return list(range(start, start + n))


# --- prefix index ---------------------------------------------------------------------
def test_hashes_are_the_shared_chained_block_hashes():
    idx = PrefixIndex(block_tokens=4)
    assert idx.hashes(toks(10)) == block_hashes(toks(10), 4)
    assert len(idx.hashes(toks(10))) == 2  # partial trailing block not hashed


@pytest.mark.parametrize(
    ("seen", "prompt", "expected"),
    [
        (toks(16), toks(16), 1.0),
        (toks(8), toks(16), 0.5),
        (toks(16), toks(8), 1.0),
        ([], toks(16), 0.0),
        (toks(16), toks(3), 0.0),  # no full block
        (toks(16), [99, *toks(15)], 0.0),  # first block differs: chain never matches
        (toks(4) + [77] * 12, toks(16), 0.25),  # leading blocks only
    ],
)
def test_score_is_matched_leading_blocks_fraction(seen, prompt, expected):
    idx = PrefixIndex(block_tokens=4)
    idx.insert("a", idx.hashes(seen))
    assert idx.score("a", idx.hashes(prompt)) == expected
    assert idx.score("other", idx.hashes(prompt)) == 0.0


def test_lru_evicts_least_recently_used_blocks():
    idx = PrefixIndex(block_tokens=4, capacity_blocks=4)
    first, second = idx.hashes(toks(16)), idx.hashes(toks(16, start=1000))
    idx.insert("a", first)
    idx.insert("a", second)
    assert idx.blocks("a") == 4
    assert idx.score("a", first) == 0.0
    assert idx.score("a", second) == 1.0
    idx.insert("a", first[:1])  # touching keeps it, evicts second's oldest block
    assert idx.score("a", first) == 0.25
    assert idx.score("a", second) == 0.0  # its first block was evicted


def test_retain_forgets_departed_pods():
    idx = PrefixIndex(block_tokens=4)
    h = idx.hashes(toks(8))
    idx.insert("a", h)
    idx.insert("b", h)
    idx.retain(["b"])
    assert idx.blocks("a") == 0 and idx.blocks("b") == 2


@pytest.mark.parametrize("kwargs", [{"block_tokens": 0}, {"capacity_blocks": 0}])
def test_bad_index_parameters(kwargs):
    with pytest.raises(ValueError):
        PrefixIndex(**kwargs)


# --- composite fallback -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("loads", "prefix", "expected"),
    [
        ([PodLoad(0, 0, 0.0)], [0.0], [2 / 3]),  # maxQ == 0: relative queue 1
        ([PodLoad(0, 0, 1.0)], [1.0], [2 / 3]),
        ([PodLoad(4, 0, 0.5), PodLoad(0, 0, 0.5)], [0, 0], [0.5 / 3, 1.5 / 3]),
        ([PodLoad(2, 0, 0, unseen_requests=2), PodLoad(2, 0, 0)], [0, 0], [1 / 3, 1.5 / 3]),
        ([PodLoad(0, 0, 0.2), PodLoad(0, 0, 0.2)], [1.0, 0.0], [2.8 / 3, 1.8 / 3]),
    ],
)
def test_composite_scores(loads, prefix, expected):
    assert composite_scores(loads, prefix) == pytest.approx(expected)


def test_composite_length_mismatch():
    with pytest.raises(ValueError):
        composite_scores([PodLoad(0, 0, 0)], [])


# --- picker ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("xs", "expected"),
    [([], []), ([3.0], [0.0]), ([2.0, 2.0], [0.0, 0.0]), ([1.0, 3.0, 2.0], [0.0, 1.0, 0.5])],
)
def test_minmax(xs, expected):
    assert minmax(xs) == expected


@pytest.mark.parametrize(
    ("preds", "best"),
    [
        ([Prediction(100, 10), Prediction(50, 10), Prediction(70, 10)], 1),
        # TTFT dominates: 0.8 weight
        ([Prediction(100, 5), Prediction(90, 50)], 1),
        # equal TTFT: TPOT decides
        ([Prediction(100, 20), Prediction(100, 10)], 1),
    ],
)
def test_rank_with_predictions_lowest_wins(preds, best):
    assert rank(random.Random(0), predictions=preds)[0] == best


def test_latency_scores_weights():
    s = latency_scores([Prediction(0, 10), Prediction(10, 0)])
    assert s == pytest.approx([0.2, 0.8])


def test_rank_with_composite_highest_wins_and_returns_full_order():
    assert rank(random.Random(0), composite=[0.1, 0.9, 0.5]) == [1, 2, 0]


def test_predictions_take_precedence():
    order = rank(random.Random(0), predictions=[Prediction(1, 1), Prediction(9, 9)],
                 composite=[0.0, 1.0])  # fmt: skip
    assert order == [0, 1]


def test_ties_broken_by_rng():
    firsts = {rank(random.Random(seed), composite=[0.5, 0.5, 0.5])[0] for seed in range(40)}
    assert firsts == {0, 1, 2}
    # reproducible by seed
    assert rank(random.Random(7), composite=[0.5] * 5) == rank(
        random.Random(7), composite=[0.5] * 5
    )


def test_rank_needs_inputs():
    with pytest.raises(ValueError):
        rank(random.Random(0))


@given(st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 1e3)), min_size=1, max_size=20),
       st.integers(0, 1000))  # fmt: skip
def test_rank_is_a_permutation_with_a_minimal_score_first(pairs, seed):
    preds = [Prediction(a, b) for a, b in pairs]
    order = rank(random.Random(seed), predictions=preds)
    assert sorted(order) == list(range(len(preds)))
    scores = latency_scores(preds)
    assert scores[order[0]] == min(scores)


# --- candidate rows ---------------------------------------------------------------------
def test_candidate_rows_come_from_build_row():
    v = PodView()
    v.apply_snapshot(PodSnapshot(pool="p", ts=1.0, pods=[
        PodRecord(name="a", url="u", ready=True, scraped_at=1.0, models=["m"], waiting=1,
                  running=2, kv_usage=0.3),
        PodRecord(name="b", url="u", ready=True, scraped_at=1.0, models=["m"]),
    ]))  # fmt: skip
    idx = PrefixIndex(block_tokens=4)
    prompt = toks(16)
    idx.insert("b", idx.hashes(prompt[:8]))
    cands = v.candidates("m", now=1.1)
    cr = build_candidate_rows(cands, 16, idx.hashes(prompt), idx)
    assert cr.prefix_scores == [0.0, 0.5]
    assert cr.rows == [build_row(16, 0.0, cands[0].load), build_row(16, 0.5, cands[1].load)]
    assert cr.uncached_tokens(1, 16) == 8.0
