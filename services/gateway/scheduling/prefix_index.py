"""Approximate per-pod prefix index (in the spirit of the Gateway API Inference Extension's).

The prompt's tokens are cut into blocks of ``block_tokens`` and hashed as a chain (each block's
hash covers its parent's), so a block hash identifies the whole prefix up to that block. After
routing, the chosen pod's block hashes are inserted into that pod's LRU (bounded by
``capacity_blocks``); the score of a pod for a new prompt is the fraction of the prompt's
blocks, counted from the start, that the pod has seen. The index is approximate: it does not
know what the pod actually evicted.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from shared.tokenizer import block_hashes


class PrefixIndex:
    def __init__(self, block_tokens: int = 64, capacity_blocks: int = 50_000) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self._pods: dict[str, OrderedDict[int, None]] = {}

    def hashes(self, tokens: Sequence[int]) -> list[int]:
        """Chained hashes of the prompt's full blocks."""
        return block_hashes(tokens, self.block_tokens)

    def score(self, pod: str, hashes: Sequence[int]) -> float:
        """Matched leading blocks / prompt blocks, 0..1 (0 for a prompt without full blocks)."""
        if not hashes:
            return 0.0
        lru = self._pods.get(pod)
        if not lru:
            return 0.0
        matched = 0
        for h in hashes:
            if h not in lru:
                break
            matched += 1
        return matched / len(hashes)

    def scores(self, pods: Iterable[str], hashes: Sequence[int]) -> list[float]:
        return [self.score(p, hashes) for p in pods]

    def insert(self, pod: str, hashes: Sequence[int]) -> None:
        """Record that ``pod`` now holds these blocks (most recently used); evict the least
        recently used blocks beyond the capacity."""
        if not hashes:
            return
        lru = self._pods.setdefault(pod, OrderedDict())
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        while len(lru) > self.capacity_blocks:
            lru.popitem(last=False)

    def blocks(self, pod: str) -> int:
        return len(self._pods.get(pod, ()))

    def retain(self, pods: Iterable[str]) -> None:
        """Forget every pod not in ``pods`` (it left the pool)."""
        keep = set(pods)
        for name in [p for p in self._pods if p not in keep]:
            del self._pods[name]
