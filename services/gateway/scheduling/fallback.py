"""Composite fallback score used when no predictions are available.

Like llm-d's fallback inside its latency scorer: a weighted mix (equal weights by default) of
free KV cache (``1 - kv``), relative queue (``(maxQ - q) / maxQ``, 1 for every pod when
``maxQ == 0``) and the prefix score. Higher is better; the result is in 0..1.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.features import PodLoad


def queue_length(load: PodLoad) -> float:
    """Waiting requests including the ones this gateway sent since the last scrape (the same
    number the feature row's ``num_request_waiting`` carries)."""
    return max(0.0, load.waiting + load.unseen_requests)


def composite_values(
    kv_usage: Sequence[float],
    queues: Sequence[float],
    prefix_scores: Sequence[float],
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> list[float]:
    """The composite score per pod from its KV use (0..1), queue length and prefix score;
    ``weights`` = (free KV, relative queue, prefix)."""
    if not len(kv_usage) == len(queues) == len(prefix_scores):
        raise ValueError("kv_usage, queues and prefix_scores differ in length")
    w_kv, w_q, w_p = weights
    total = w_kv + w_q + w_p
    if total <= 0:
        return [0.0] * len(queues)
    qs = [max(0.0, q) for q in queues]
    max_q = max(qs, default=0.0)
    out = []
    for kv, q, prefix in zip(kv_usage, qs, prefix_scores, strict=True):
        free_kv = 1.0 - min(1.0, max(0.0, kv))
        rel_queue = 1.0 if max_q <= 0 else (max_q - q) / max_q
        out.append((w_kv * free_kv + w_q * rel_queue + w_p * min(1.0, max(0.0, prefix))) / total)
    return out


def composite_scores(loads: Sequence[PodLoad], prefix_scores: Sequence[float]) -> list[float]:
    if len(loads) != len(prefix_scores):
        raise ValueError("loads and prefix_scores differ in length")
    return composite_values(
        [load.kv_usage for load in loads], [queue_length(load) for load in loads], prefix_scores
    )
