"""Rank candidate pods, best first.

With predictions (llm-d's latency scorer, no-SLO case): each pod's score is
``0.8 * minmax(ttft) + 0.2 * minmax(tpot)`` over the candidates and the lowest wins.
Without predictions: the highest composite fallback score wins. Exact ties are broken by the
passed-in ``rng``. The full ranking is returned so a retry can take the next pod.

Pure: no I/O; randomness comes from the caller.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

TTFT_WEIGHT = 0.8
TPOT_WEIGHT = 0.2


@dataclass(frozen=True, slots=True)
class Prediction:
    ttft_ms: float
    tpot_ms: float


def minmax(xs: Sequence[float]) -> list[float]:
    """Scale to 0..1 over the sequence; all zeros when every value is equal."""
    if not xs:
        return []
    lo, hi = min(xs), max(xs)
    if hi <= lo:
        return [0.0] * len(xs)
    span = hi - lo
    return [(x - lo) / span for x in xs]


def latency_scores(predictions: Sequence[Prediction]) -> list[float]:
    """0.8 * minmax(ttft) + 0.2 * minmax(tpot); lower is better."""
    ttft = minmax([p.ttft_ms for p in predictions])
    tpot = minmax([p.tpot_ms for p in predictions])
    return [TTFT_WEIGHT * a + TPOT_WEIGHT * b for a, b in zip(ttft, tpot, strict=True)]


def rank(
    rng: random.Random,
    *,
    predictions: Sequence[Prediction] | None = None,
    composite: Sequence[float] | None = None,
) -> list[int]:
    """Candidate indices, best first. Give ``predictions`` (lowest latency score wins) or
    ``composite`` (highest wins); predictions take precedence when both are given."""
    if predictions is not None:
        keys = list(latency_scores(predictions))
    elif composite is not None:
        keys = [-c for c in composite]
    else:
        raise ValueError("rank needs predictions or composite scores")
    tiebreak = [rng.random() for _ in keys]
    return sorted(range(len(keys)), key=lambda i: (keys[i], tiebreak[i]))
