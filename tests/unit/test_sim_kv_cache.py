"""Block pool: reference counts, prefix lookup, LRU eviction of freed blocks."""

from __future__ import annotations

import pytest

from services.simulator.kv_cache import BlockPool


def test_allocate_and_release_track_free_blocks():
    pool = BlockPool(8)
    blocks = pool.allocate(3)
    assert pool.num_free == 5
    assert pool.usage == pytest.approx(3 / 8)
    pool.release(blocks)
    assert pool.num_free == 8
    assert pool.usage == 0.0


def test_allocate_more_than_free_raises():
    pool = BlockPool(2)
    with pytest.raises(RuntimeError):
        pool.allocate(3)


def test_double_release_raises():
    pool = BlockPool(2)
    b = pool.allocate(1)
    pool.release(b)
    with pytest.raises(RuntimeError):
        pool.release(b)


def test_lookup_returns_longest_cached_prefix():
    pool = BlockPool(8)
    blocks = pool.allocate(3)
    for b, h in zip(blocks, (11, 12, 13), strict=True):
        pool.cache(b, h)
    assert pool.lookup([11, 12, 13, 14]) == blocks
    assert pool.lookup([11, 99, 13]) == blocks[:1]
    assert pool.lookup([99]) == []


def test_freed_cached_blocks_can_be_revived():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    pool.cache(blocks[0], 1)
    pool.cache(blocks[1], 2)
    pool.release(blocks)
    hits = pool.lookup([1, 2])
    assert hits == blocks
    assert pool.can_allocate(2, hits)
    assert not pool.can_allocate(3, hits)  # the two revived blocks are no longer free
    pool.touch(hits)
    assert pool.num_free == 2


def test_shared_block_needs_all_references_released():
    pool = BlockPool(4)
    [b] = pool.allocate(1)
    pool.cache(b, 7)
    pool.touch([b])  # a second request shares it
    pool.release([b])
    assert pool.num_free == 3
    pool.release([b])
    assert pool.num_free == 4


def test_tail_blocks_are_evicted_first():
    pool = BlockPool(4)
    chain = pool.allocate(4)
    for i, b in enumerate(chain):
        pool.cache(b, 100 + i)
    pool.release(chain)  # tail first into the free queue
    pool.allocate(1)  # evicts the least recently freed: the chain's tail
    assert pool.lookup([100, 101, 102, 103]) == chain[:3]
    pool.allocate(2)
    assert pool.lookup([100, 101, 102, 103]) == chain[:1]


def test_least_recently_freed_chain_is_evicted_before_newer_one():
    pool = BlockPool(4)
    old = pool.allocate(2)
    new = pool.allocate(2)
    for b, h in zip(old + new, (1, 2, 3, 4), strict=True):
        pool.cache(b, h)
    pool.release(old)
    pool.release(new)
    pool.allocate(2)
    assert pool.lookup([1, 2]) == []
    assert pool.lookup([3, 4]) == new


def test_duplicate_hash_keeps_first_block():
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    pool.cache(a, 5)
    pool.cache(b, 5)
    assert pool.lookup([5]) == [a]
    assert pool.num_cached == 1
