"""The one feature builder: a feature row per (request, candidate pod).

The gateway builds these rows for prediction, stores the chosen pod's row with the routed
request and publishes exactly that row as the training sample; the trainer, predictor and
routing lab all index rows by the column lists below. Changing a column means bumping
FEATURE_SCHEMA_VERSION (samples carry it and are validated against it).

Columns follow llm-d's predictor (see docs/architecture.md):
TTFT model: all columns; TPOT model: the first seven plus pod_type.
"""

from __future__ import annotations

from dataclasses import dataclass

FEATURE_SCHEMA_VERSION = 1

FEATURES: tuple[str, ...] = (
    "is_queued",  # 1 if the pod has waiting requests
    "kv_cache_percentage",  # KV-cache use, 0..1
    "input_token_length",  # prompt tokens of this request
    "num_request_waiting",  # scraped waiting + gateway-known not-yet-visible requests
    "num_request_running",  # scraped running requests
    "prefill_tokens_in_flight",  # uncached prompt tokens routed here, first token not yet seen
    "decode_tokens_in_flight",  # max_tokens of requests routed here that are decoding
    "prefix_cache_score",  # fraction of the prompt's blocks the pod likely has cached, 0..1
    "effective_input_tokens",  # (1 - prefix score) x input tokens
    "prefix_score_bucket",  # quartile bucket of the prefix score, 0..3
    "pod_type",  # 0 both, 1 prefill, 2 decode
)

TTFT_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES)))
TPOT_COLUMNS: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 10)

POD_TYPES = {"both": 0, "prefill": 1, "decode": 2}


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What the gateway knows about one pod's load at decision time."""

    waiting: float
    running: float
    kv_usage: float
    prefill_tokens_in_flight: float = 0.0
    decode_tokens_in_flight: float = 0.0
    unseen_requests: float = 0.0  # routed by this gateway since the last scrape
    pod_type: str = "both"


def prefix_bucket(score: float) -> int:
    return min(3, max(0, int(score * 4)))


def build_row(input_tokens: int, prefix_score: float, load: PodLoad) -> list[float]:
    """One feature row in FEATURES order."""
    prefix_score = min(1.0, max(0.0, prefix_score))
    waiting = load.waiting + load.unseen_requests
    return [
        1.0 if waiting > 0 else 0.0,
        min(1.0, max(0.0, load.kv_usage)),
        float(input_tokens),
        float(waiting),
        float(load.running),
        float(load.prefill_tokens_in_flight),
        float(load.decode_tokens_in_flight),
        prefix_score,
        (1.0 - prefix_score) * input_tokens,
        float(prefix_bucket(prefix_score)),
        float(POD_TYPES.get(load.pod_type, 0)),
    ]


def select(row: list[float], columns: tuple[int, ...]) -> list[float]:
    return [row[i] for i in columns]
