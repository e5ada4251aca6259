"""Paged KV-cache block pool with prefix caching, modelled on vLLM V1 (pure, no clock).

- Blocks hold ``block_size`` tokens. A full block may be registered under its chained hash
  (``shared.tokenizer.block_hashes``); partial blocks are never cached.
- Blocks are reference counted. A block whose count drops to zero goes to the tail of the
  free queue but keeps its hash, so a later request with the same prefix can revive it.
- Allocation takes blocks from the head of the free queue (least recently freed first) and
  evicts whatever hash they held. Callers release a request's blocks tail first, so a
  chain's tail blocks are evicted before its head.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        self.num_blocks = num_blocks
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[int, int] = {}  # block hash -> block id

    @property
    def num_free(self) -> int:
        """Blocks with no reference (including cached-but-unused ones)."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (does not take references)."""
        out: list[int] = []
        for h in hashes:
            b = self._cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def can_allocate(self, n_new: int, hits: Sequence[int] = ()) -> bool:
        """Whether ``n_new`` fresh blocks fit after taking references on ``hits``."""
        revived = sum(1 for b in hits if self._ref[b] == 0)
        return n_new <= len(self._free) - revived

    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on each block (reviving free cached blocks)."""
        for b in blocks:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks with one reference each; raises if not enough are free."""
        if n > len(self._free):
            raise RuntimeError(f"cannot allocate {n} blocks, {len(self._free)} free")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self._hash[b]
            if h is not None:
                if self._cached.get(h) == b:
                    del self._cached[h]
                self._hash[b] = None
            self._ref[b] = 1
            out.append(b)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference per block, tail first, so tail blocks are evicted first."""
        for b in reversed(blocks):
            if self._ref[b] <= 0:
                raise RuntimeError(f"block {b} released twice")
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free[b] = None

    def cache(self, block: int, block_hash: int) -> None:
        """Register a full block under its hash (first writer wins on duplicates)."""
        if self._hash[block] is None and block_hash not in self._cached:
            self._hash[block] = block_hash
            self._cached[block_hash] = block

    def fork(self) -> BlockPool:
        """An independent copy (the routing lab's regret replays fork pods' engines)."""
        new = BlockPool.__new__(BlockPool)
        new.num_blocks = self.num_blocks
        new._ref = list(self._ref)
        new._hash = list(self._hash)
        new._free = self._free.copy()
        new._cached = dict(self._cached)
        return new

    # ---- inspection (tests) ------------------------------------------------------------

    def free_order(self) -> list[int]:
        """Free blocks in eviction order (next to be reused first)."""
        return list(self._free)

    def ref_counts(self) -> list[int]:
        return list(self._ref)

    def cached_hash(self, block: int) -> int | None:
        return self._hash[block]

    def audit(self) -> None:
        """Check the pool's invariants; raises ``AssertionError`` on the first broken one:
        free + used == total, ref counts >= 0, free blocks are exactly the unreferenced
        ones, and every cached hash points at a block that still holds it (so it is
        reachable by ``lookup``), either in use or revivable from the free queue."""
        used = sum(1 for r in self._ref if r > 0)
        assert min(self._ref) >= 0, "negative ref count"
        assert used + len(self._free) == self.num_blocks, "free + used != total"
        assert all(self._ref[b] == 0 for b in self._free), "referenced block in free queue"
        for h, b in self._cached.items():
            assert self._hash[b] == h, f"cached hash {h} points at block {b} holding another"
        hashed = sum(1 for h in self._hash if h is not None)
        assert hashed == len(self._cached), "hashed block missing from the cache index"
