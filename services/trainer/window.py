"""The training window: a stratified, bounded, de-duplicated set of recent samples (pure).

Samples are kept per bucket of :class:`~services.trainer.strata.Strata`. Each bucket holds at
most ``bucket_cap`` samples (oldest out within the bucket); when the whole window exceeds
``max_size`` the oldest sample of the *fullest* bucket goes, so a flood of one regime shrinks
that regime first and rare regimes survive. An optional ``max_age_s`` forgets samples older
than that (a workload shift is forgotten), and :meth:`flush` drops everything and refuses
samples stamped before the flush.

Request ids seen recently are remembered (bounded by ``dedup_size``) so a redelivered or
re-published sample enters the window at most once. The window is a deterministic function
of the samples offered (and the ``now`` values passed in), which is what lets a restarted
trainer rebuild it by replaying the stream.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from services.trainer.strata import Strata
from shared.features import FEATURES
from shared.schemas import TrainingSample

N_FEATURES = len(FEATURES)
TARGETS = ("ttft", "tpot", "e2e")

ADDED = "added"
DUPLICATE = "duplicate"
EXPIRED = "expired"  # older than max_age_s on arrival
FLUSHED = "flushed"  # stamped before the last flush


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """What the window keeps of one sample: the feature row and the measured targets."""

    request_id: str
    row: tuple[float, ...]
    ts: float
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    key: int = 0
    seq: int = 0  # arrival order in this window

    @classmethod
    def from_sample(cls, s: TrainingSample, key: int = 0, seq: int = 0) -> WindowEntry:
        tpot = s.tpot_ms if (s.tpot_ms is not None and s.output_tokens >= 2) else None
        return cls(
            request_id=s.request_id,
            row=tuple(map(float, s.features)),
            ts=float(s.ts),
            ttft_ms=None if s.ttft_ms is None else float(s.ttft_ms),
            tpot_ms=None if tpot is None else float(tpot),
            e2e_ms=float(s.e2e_ms),
            key=key,
            seq=seq,
        )

    def label(self, target: str) -> float | None:
        return getattr(self, f"{target}_ms")


class SampleWindow:
    """Stratified window of training samples with request-id de-duplication."""

    def __init__(
        self,
        max_size: int,
        dedup_size: int | None = None,
        *,
        strata: Strata | None = None,
        bucket_cap: int | None = None,
        max_age_s: float | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError("max_size must be >= 1")
        if bucket_cap is not None and bucket_cap < 1:
            raise ValueError("bucket_cap must be >= 1")
        if max_age_s is not None and max_age_s <= 0:
            raise ValueError("max_age_s must be > 0")
        self.max_size = max_size
        self.strata = strata if strata is not None else Strata({})
        self.bucket_cap = bucket_cap or max_size
        self.max_age_s = max_age_s
        self.dedup_size = max(dedup_size if dedup_size is not None else 2 * max_size, 1)
        self.not_before = float("-inf")  # flush cutoff (sample ts)
        self._buckets: dict[int, deque[WindowEntry]] = {}
        self._by_size: dict[int, dict[int, None]] = {}  # bucket size -> bucket keys
        self._max_bucket = 0
        self._size = 0
        self._counts = dict.fromkeys(TARGETS, 0)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seq = 0
        self.added_total = 0  # samples accepted since creation (monotonic)
        self.duplicates_total = 0
        self.evicted: dict[str, int] = {
            "bucket_cap": 0,
            "max_size": 0,
            "age": 0,
            "flush": 0,
            "shift": 0,
        }

    def __len__(self) -> int:
        return self._size

    def seen(self, request_id: str) -> bool:
        return request_id in self._seen

    # --- adding -------------------------------------------------------------------------
    def offer(self, sample: TrainingSample, now: float | None = None) -> str:
        """Add a validated sample; returns ADDED, DUPLICATE, EXPIRED or FLUSHED."""
        rid = sample.request_id
        if rid in self._seen:
            self.duplicates_total += 1
            return DUPLICATE
        if sample.ts < self.not_before:
            return FLUSHED
        if self.max_age_s is not None and now is not None and sample.ts < now - self.max_age_s:
            return EXPIRED
        seen = self._seen
        seen[rid] = None
        if len(seen) > self.dedup_size:
            seen.popitem(last=False)
        key = self.strata.key(sample.features)
        self._seq += 1
        entry = WindowEntry.from_sample(sample, key, self._seq)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
        bucket.append(entry)
        self._resize(key, len(bucket) - 1, len(bucket))
        self._size += 1
        self._count(entry, +1)
        self.added_total += 1
        if self._size > self.max_size:  # the fullest bucket (this one if over its cap)
            self._evict(next(iter(self._by_size[self._max_bucket])), "max_size")
        elif len(bucket) > self.bucket_cap:
            self._evict(key, "bucket_cap")
        return ADDED

    def add(self, sample: TrainingSample, now: float | None = None) -> bool:
        return self.offer(sample, now) == ADDED

    def _evict(self, key: int, reason: str) -> None:
        bucket = self._buckets[key]
        self._count(bucket.popleft(), -1)
        self._resize(key, len(bucket) + 1, len(bucket))
        if not bucket:
            del self._buckets[key]
        self._size -= 1
        self.evicted[reason] += 1

    def _resize(self, key: int, old: int, new: int) -> None:
        if old:
            keys = self._by_size[old]
            del keys[key]
            if not keys:
                del self._by_size[old]
        if new:
            self._by_size.setdefault(new, {})[key] = None
            self._max_bucket = max(self._max_bucket, new)
        while self._max_bucket and self._max_bucket not in self._by_size:
            self._max_bucket -= 1

    def _count(self, e: WindowEntry, delta: int) -> None:
        c = self._counts
        if e.ttft_ms is not None:
            c["ttft"] += delta
        if e.tpot_ms is not None:
            c["tpot"] += delta
        if e.e2e_ms is not None:
            c["e2e"] += delta

    # --- forgetting ---------------------------------------------------------------------
    def expire(self, now: float) -> int:
        """Drop samples older than ``max_age_s`` (by sample ts); returns how many."""
        if self.max_age_s is None:
            return 0
        return self._drop_before(now - self.max_age_s, "age")

    def flush(self, now: float) -> int:
        """Drop every sample and refuse samples stamped before ``now`` from now on (samples
        already seen stay remembered, so redeliveries are still duplicates)."""
        self.not_before = max(self.not_before, now)
        return self._drop_before(float("inf"), "flush")

    def forget_before(self, cutoff: float) -> int:
        """Drop samples stamped before ``cutoff`` (a detected workload shift began then);
        later samples of any time are still accepted. Returns how many."""
        return self._drop_before(cutoff, "shift")

    def _drop_before(self, cutoff: float, reason: str) -> int:
        dropped = 0
        for key in list(self._buckets):
            bucket = self._buckets[key]
            if all(e.ts >= cutoff for e in bucket):
                continue
            keep = deque(e for e in bucket if e.ts >= cutoff)
            for e in bucket:
                if e.ts < cutoff:
                    self._count(e, -1)
            n = len(bucket) - len(keep)
            self._resize(key, len(bucket), len(keep))
            if keep:
                self._buckets[key] = keep
            else:
                del self._buckets[key]
            dropped += n
        self._size -= dropped
        self.evicted[reason] += dropped
        return dropped

    # --- reading ------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Samples usable per target."""
        return dict(self._counts)

    def snapshot(self) -> tuple[WindowEntry, ...]:
        """The entries in arrival order (cheap; build arrays from it off the event loop)."""
        entries = [e for b in self._buckets.values() for e in b]
        entries.sort(key=lambda e: e.seq)
        return tuple(entries)

    def rows(self) -> np.ndarray:
        """All feature rows (n x N_FEATURES) in arrival order."""
        rows = [e.row for e in self.snapshot()]
        return np.array(rows, dtype=np.float64).reshape(-1, N_FEATURES)

    def request_ids(self) -> list[str]:
        return [e.request_id for e in self.snapshot()]

    def bucket_sizes(self) -> dict[int, int]:
        return {k: len(b) for k, b in self._buckets.items()}

    def coverage(self) -> dict:
        return self.strata.coverage(self.bucket_sizes())


def entries_of(samples: Iterable[TrainingSample]) -> tuple[WindowEntry, ...]:
    """Window entries for plain samples (no stratification; the routing lab's input)."""
    return tuple(WindowEntry.from_sample(s, 0, i) for i, s in enumerate(samples))
