"""Approximate per-pod prefix index (in the spirit of the Gateway API Inference Extension's).

The prompt's tokens are cut into blocks of ``block_tokens`` and hashed as a chain (each block's
hash covers its parent's), so a block hash identifies the whole prefix up to that block. After
routing, the chosen pod's block hashes are inserted into that pod's LRU (bounded by
``capacity_blocks``); the score of a pod for a new prompt is the fraction of the prompt's
blocks, counted from the start, that the pod has seen. The index is approximate: it does not
know what the pod actually evicted. Blocks are recorded when the request is sent (as the
Inference Extension's prefix plugin records them in ``PreRequest``), not when the pod answers:
a request for the same prefix routed while the first is still prefilling it goes where the
prefix will be; blocks a pod never got (it failed or refused the request before its first byte)
are forgotten again.

With ``auto_capacity`` (the default, like the Inference Extension's ``autoTune``) a pod that
reports its KV-cache capacity (``PodRecord.kv_capacity_tokens``, from vLLM's
``cache_config_info``) gets an LRU of that many tokens' worth of blocks, so the index forgets
blocks at about the rate the pod evicts them; other pods keep ``capacity_blocks``.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from shared.schemas import PodRecord
from shared.tokenizer import block_hashes


class PrefixIndex:
    def __init__(
        self, block_tokens: int = 64, capacity_blocks: int = 50_000, auto_capacity: bool = True
    ) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be >= 1")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self.auto_capacity = auto_capacity
        self._pods: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}  # pods sized from their reported KV capacity

    def capacity(self, pod: str) -> int:
        """The pod's LRU capacity in blocks."""
        return self._capacity.get(pod, self.capacity_blocks)

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

    def insert(self, pod: str, hashes: Sequence[int]) -> list[int]:
        """Record that ``pod`` now holds these blocks (most recently used); evict the least
        recently used blocks beyond the capacity. Returns the blocks it did not hold before
        (what :meth:`forget` takes back when the pod never got them)."""
        if not hashes:
            return []
        lru = self._pods.setdefault(pod, OrderedDict())
        added = []
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                added.append(h)
        cap = self._capacity.get(pod, self.capacity_blocks)
        while len(lru) > cap:
            lru.popitem(last=False)
        return added

    def forget(self, pod: str, hashes: Sequence[int]) -> None:
        """``pod`` does not hold these blocks after all (recorded by :meth:`insert` for a
        request the pod failed or refused before taking it)."""
        lru = self._pods.get(pod)
        if lru:
            for h in hashes:
                lru.pop(h, None)

    def blocks(self, pod: str) -> int:
        return len(self._pods.get(pod, ()))

    def total_blocks(self) -> int:
        """Blocks held over every pod (at most the sum of the pods' capacities)."""
        return sum(len(lru) for lru in self._pods.values())

    def total_capacity(self) -> int:
        """The index's bound: the sum of the known pods' capacities in blocks."""
        return sum(self.capacity(p) for p in self._pods)

    def retain(self, pods: Iterable[str]) -> None:
        """Forget every pod not in ``pods`` (it left the pool)."""
        keep = set(pods)
        for name in [p for p in self._pods if p not in keep]:
            del self._pods[name]
        for name in [p for p in self._capacity if p not in keep]:
            del self._capacity[name]

    def sync(self, records: Iterable[PodRecord]) -> None:
        """Apply a pool snapshot: forget pods that left; with ``auto_capacity``, size each
        pod's LRU from its reported KV capacity (evicting the oldest blocks if it shrank)."""
        records = list(records)
        self.retain(r.name for r in records)
        if not self.auto_capacity:
            return
        for r in records:
            tokens = r.kv_capacity_tokens
            if tokens is None or tokens <= 0:
                continue
            cap = max(1, math.ceil(tokens / self.block_tokens))
            if self._capacity.get(r.name) == cap:
                continue
            self._capacity[r.name] = cap
            lru = self._pods.get(r.name)
            while lru is not None and len(lru) > cap:
                lru.popitem(last=False)
