"""The training window: a bounded, de-duplicated set of recent training samples (pure).

Oldest samples fall out once ``max_size`` is reached. Request ids seen recently are
remembered (bounded by ``dedup_size``) so a redelivered or re-published sample is counted
once. :func:`target_arrays` gives the rows and labels each latency target is
fitted on: TTFT from samples with a measured ``ttft_ms``; TPOT from samples with a
``tpot_ms`` and at least two output tokens.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from shared.features import FEATURES
from shared.schemas import TrainingSample

N_FEATURES = len(FEATURES)


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """What the window keeps of one sample: the feature row and the measured targets."""

    request_id: str
    row: tuple[float, ...]
    ttft_ms: float | None
    tpot_ms: float | None

    @classmethod
    def from_sample(cls, s: TrainingSample) -> WindowEntry:
        tpot = s.tpot_ms if (s.tpot_ms is not None and s.output_tokens >= 2) else None
        return cls(
            request_id=s.request_id,
            row=tuple(float(v) for v in s.features),
            ttft_ms=None if s.ttft_ms is None else float(s.ttft_ms),
            tpot_ms=None if tpot is None else float(tpot),
        )


class SampleWindow:
    """Bounded FIFO of samples with request-id de-duplication."""

    def __init__(self, max_size: int, dedup_size: int | None = None) -> None:
        if max_size < 1:
            raise ValueError("max_size must be >= 1")
        self.max_size = max_size
        self.dedup_size = max(dedup_size if dedup_size is not None else 2 * max_size, 1)
        self._entries: deque[WindowEntry] = deque()
        self._counts = {"ttft": 0, "tpot": 0}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.added_total = 0  # samples accepted since creation (monotonic)
        self.duplicates_total = 0

    def __len__(self) -> int:
        return len(self._entries)

    def seen(self, request_id: str) -> bool:
        return request_id in self._seen

    def add(self, sample: TrainingSample) -> bool:
        """Add a validated sample; False (and nothing changes) if its request id was seen."""
        if sample.request_id in self._seen:
            self.duplicates_total += 1
            return False
        self._seen[sample.request_id] = None
        while len(self._seen) > self.dedup_size:
            self._seen.popitem(last=False)
        if len(self._entries) == self.max_size:
            self._count(self._entries.popleft(), -1)
        entry = WindowEntry.from_sample(sample)
        self._entries.append(entry)
        self._count(entry, +1)
        self.added_total += 1
        return True

    def _count(self, e: WindowEntry, delta: int) -> None:
        if e.ttft_ms is not None:
            self._counts["ttft"] += delta
        if e.tpot_ms is not None:
            self._counts["tpot"] += delta

    def counts(self) -> dict[str, int]:
        """Samples usable per target."""
        return dict(self._counts)

    def snapshot(self) -> tuple[WindowEntry, ...]:
        """The entries, oldest first (cheap; build arrays from it off the event loop)."""
        return tuple(self._entries)

    def rows(self) -> np.ndarray:
        """All rows (n x 11), oldest first."""
        return _rows(self._entries)

    def target_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return target_arrays(self._entries)


def _rows(entries: Iterable[WindowEntry]) -> np.ndarray:
    return np.array([e.row for e in entries], dtype=np.float64).reshape(-1, N_FEATURES)


def target_arrays(entries: Iterable[WindowEntry]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{"ttft": (x, y), "tpot": (x, y)}``: full rows and labels (ms) for each target."""
    entries = tuple(entries)
    ttft = [e for e in entries if e.ttft_ms is not None]
    tpot = [e for e in entries if e.tpot_ms is not None]
    return {
        "ttft": (_rows(ttft), np.array([e.ttft_ms for e in ttft], dtype=np.float64)),
        "tpot": (_rows(tpot), np.array([e.tpot_ms for e in tpot], dtype=np.float64)),
    }
