"""Prefix index, composite fallback score and candidate rows (the pickers are tested in
test_scheduling_plugins.py)."""

from __future__ import annotations

import pytest

from services.gateway.scheduling.fallback import composite_scores, composite_values
from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.prefix_index import PrefixIndex
from services.gateway.scheduling.rows import build_candidate_rows
from shared.features import PodLoad, RowContext, build_row
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


def _rec(name, capacity=None):
    return PodRecord(name=name, url="u", ready=True, scraped_at=0.0, kv_capacity_tokens=capacity)


def test_sync_sizes_each_pod_from_its_reported_kv_capacity():
    idx = PrefixIndex(block_tokens=4, capacity_blocks=100)
    idx.sync([_rec("a", capacity=10.0), _rec("b")])  # 10 tokens -> 3 blocks of 4
    assert (idx.capacity("a"), idx.capacity("b")) == (3, 100)
    idx.insert("a", idx.hashes(toks(40)))
    idx.insert("b", idx.hashes(toks(40)))
    assert (idx.blocks("a"), idx.blocks("b")) == (3, 10)
    # a smaller capacity evicts the oldest blocks at once; a pod that left is forgotten
    idx.sync([_rec("a", capacity=4.0)])
    assert idx.blocks("a") == 1 and idx.score("a", idx.hashes(toks(40))) == 0.0  # first gone
    assert idx.blocks("b") == 0 and idx.capacity("b") == 100


def test_sync_without_auto_capacity_keeps_the_configured_size():
    idx = PrefixIndex(block_tokens=4, capacity_blocks=5, auto_capacity=False)
    idx.sync([_rec("a", capacity=8.0)])
    idx.insert("a", idx.hashes(toks(40)))
    assert idx.capacity("a") == 5 and idx.blocks("a") == 5


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
    with pytest.raises(ValueError):
        composite_values([0.1], [1.0, 2.0], [0.0])


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ((1.0, 1.0, 1.0), [(0.9 + 0.0 + 1.0) / 3, (0.1 + 1.0 + 0.0) / 3]),
        ((0.0, 1.0, 0.0), [0.0, 1.0]),
        ((2.0, 0.0, 1.0), [(2 * 0.9 + 1.0) / 3, 2 * 0.1 / 3]),
        ((0.0, 0.0, 0.0), [0.0, 0.0]),
    ],
)
def test_composite_values_weights(weights, expected):
    got = composite_values([0.1, 0.9], [4.0, 0.0], [1.0, 0.0], weights)
    assert got == pytest.approx(expected)


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
    ctx = [RowContext(0, 0.0, c.backlog_s, c.protected_decodes) for c in cands]
    assert cr.rows == [build_row(16, 0.0, cands[0].load, ctx[0]),
                       build_row(16, 0.5, cands[1].load, ctx[1])]  # fmt: skip
    assert cr.uncached_tokens(1, 16) == 8.0
    assert cr.cached_blocks == [0, 2]
