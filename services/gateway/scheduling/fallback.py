"""Composite fallback score used when no predictions are available.

Like llm-d's fallback inside its latency scorer: an equal-weight mix of free KV cache
(``1 - kv``), relative queue (``(maxQ - q) / maxQ``, 1 for every pod when ``maxQ == 0``) and the
prefix score. Higher is better; the result is in 0..1.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.features import PodLoad


def queue_length(load: PodLoad) -> float:
    """Waiting requests including the ones this gateway sent since the last scrape (the same
    number the feature row's ``num_request_waiting`` carries)."""
    return max(0.0, load.waiting + load.unseen_requests)


def composite_scores(loads: Sequence[PodLoad], prefix_scores: Sequence[float]) -> list[float]:
    if len(loads) != len(prefix_scores):
        raise ValueError("loads and prefix_scores differ in length")
    queues = [queue_length(load) for load in loads]
    max_q = max(queues, default=0.0)
    out = []
    for load, q, prefix in zip(loads, queues, prefix_scores, strict=True):
        free_kv = 1.0 - min(1.0, max(0.0, load.kv_usage))
        rel_queue = 1.0 if max_q <= 0 else (max_q - q) / max_q
        out.append((free_kv + rel_queue + min(1.0, max(0.0, prefix))) / 3.0)
    return out
