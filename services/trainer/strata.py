"""Strata of the training window: which bucket a feature row falls in (pure).

A stratum is a feature column plus ascending bin edges; a value falls in bucket
``bisect_right(edges, value)`` (0 .. len(edges)). The bucket of a row is the mixed-radix
combination of its buckets along every stratum. Defaults follow llm-d's training buckets
(queue depth, KV-cache use in 5% steps, prefix-score quartile) plus prompt length, so a
burst of one regime cannot push rare regimes out of the window.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from shared.features import FEATURES

DEFAULT_STRATA: dict[str, tuple[float, ...]] = {
    "num_request_waiting": (1.0, 2.0, 4.0, 8.0),  # 0, 1, 2-3, 4-7, 8+
    "kv_cache_percentage": tuple(round(0.05 * i, 2) for i in range(1, 20)),  # 20 x 5%
    "prefix_score_bucket": (1.0, 2.0, 3.0),  # quartiles 0..3
    "input_token_length": (256.0, 1024.0, 4096.0, 16384.0),  # 5 prompt-length buckets
}


@dataclass(frozen=True, slots=True)
class Stratum:
    feature: str
    edges: tuple[float, ...]
    column: int

    @property
    def buckets(self) -> int:
        return len(self.edges) + 1


class Strata:
    """The stratification of feature rows into numbered buckets."""

    def __init__(self, spec: Mapping[str, Sequence[float]] | None = None) -> None:
        spec = DEFAULT_STRATA if spec is None else spec
        strata = []
        for feature, edges in spec.items():
            if feature not in FEATURES:
                raise ValueError(f"unknown stratum feature {feature!r} (one of {FEATURES})")
            e = tuple(float(x) for x in edges)
            if any(b <= a for a, b in pairwise(e)):
                raise ValueError(f"stratum {feature!r}: edges must be strictly ascending")
            strata.append(Stratum(feature, e, FEATURES.index(feature)))
        self.strata: tuple[Stratum, ...] = tuple(strata)
        strides, total = [], 1
        for s in reversed(self.strata):
            strides.append(total)
            total *= s.buckets
        self._strides = tuple(reversed(strides))
        self.total = total
        self._plan = tuple(
            (s.column, s.edges, stride)
            for s, stride in zip(self.strata, self._strides, strict=True)
        )

    def key(self, row: Sequence[float]) -> int:
        """The bucket number of a full feature row (0 .. total - 1)."""
        k = 0
        for column, edges, stride in self._plan:
            k += bisect_right(edges, row[column]) * stride
        return k

    def position(self, key: int) -> tuple[int, ...]:
        """The per-stratum bucket indices of a bucket number."""
        return tuple(
            (key // stride) % s.buckets
            for s, stride in zip(self.strata, self._strides, strict=True)
        )

    def coverage(self, sizes: Mapping[int, int]) -> dict:
        """How a window with ``sizes`` (bucket -> samples) covers the strata."""
        per_feature = {s.feature: [0] * s.buckets for s in self.strata}
        filled = 0
        for key, n in sizes.items():
            if n <= 0:
                continue
            filled += 1
            for s, i in zip(self.strata, self.position(key), strict=True):
                per_feature[s.feature][i] += n
        return {
            "buckets_total": self.total,
            "buckets_filled": filled,
            "max_bucket": max(sizes.values(), default=0),
            "features": per_feature,
        }

    def describe(self) -> dict[str, list[float]]:
        return {s.feature: list(s.edges) for s in self.strata}
