"""The one feature builder: a feature row per (request, candidate pod).

The gateway builds these rows for prediction, stores the chosen pod's row with the routed
request and publishes exactly that row as the training sample; the trainer, predictor and
routing lab all index rows by the column lists below. Changing a column means bumping
FEATURE_SCHEMA_VERSION (samples carry it and are validated against it).

Schema 2 = llm-d's eleven (schema 1, unchanged, first) + the pod view's own estimates.
Columns 0-10 follow llm-d's predictor (see docs/architecture.md); a model names the
columns it reads (ModelSpec ``features``): ``v1`` = llm-d's sets (TTFT: columns 0-10; TPOT:
the first seven plus pod_type), ``v2`` = every column for both targets. A v1 model reads
the same first eleven columns of a schema-2 row, so models of either schema are served.

The v2 columns are what the gateway's analytic view already estimates (pure arithmetic on
state it holds, no extra I/O): the decode budget, the estimated prefill seconds queued
ahead of the request on the pod (``backlog``), the cost model's own prefill estimate for
the request there (``service``), their sum (the analytic TTFT), the decoding requests a
prefill there would slow (``protected_decodes``), the decode batch the request joins and
the requests this gateway's flow-control queue holds (they reach the pods within the
request's lifetime: the near future).
"""

from __future__ import annotations

from dataclasses import dataclass

FEATURE_SCHEMA_VERSION = 2
SUPPORTED_MODEL_SCHEMAS = (1, 2)  # a schema-1 model reads columns 0-10, unchanged in 2

FEATURES_V1: tuple[str, ...] = (
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

FEATURES: tuple[str, ...] = (
    *FEATURES_V1,
    "max_tokens",  # the request's decode budget (max_tokens or the gateway default)
    "backlog_ms",  # estimated prefill queued ahead on the pod (pod view, cost model)
    "service_ms",  # the cost model's prefill estimate for this request's uncached part
    "estimate_ms",  # backlog + service: the analytic TTFT estimate
    "protected_decodes",  # decoding requests a prefill here would slow (pod view)
    "decode_batch",  # running + waiting (incl. unseen) + 1: the batch the request joins
    "gateway_queued",  # requests waiting in this gateway's flow-control queue
)

TTFT_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES_V1)))
TPOT_COLUMNS: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 10)
ALL_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES)))
ESTIMATE_COLUMN = FEATURES.index("estimate_ms")

# feature set -> target -> columns (e2e uses TTFT's)
FEATURE_SETS: dict[str, dict[str, tuple[int, ...]]] = {
    "v1": {"ttft": TTFT_COLUMNS, "tpot": TPOT_COLUMNS, "e2e": TTFT_COLUMNS},
    "v2": {"ttft": ALL_COLUMNS, "tpot": ALL_COLUMNS, "e2e": ALL_COLUMNS},
}

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


@dataclass(frozen=True, slots=True)
class RowContext:
    """The v2 inputs of one (request, pod) row beyond the pod's load: the request's decode
    budget, the pod view's estimates for this pod, and the gateway's queue."""

    max_tokens: float = 0.0
    service_s: float = 0.0  # the cost model's prefill estimate for the request here
    backlog_s: float = 0.0  # estimated prefill seconds queued ahead on the pod
    protected_decodes: float = 0.0
    gateway_queued: float = 0.0


_NO_CONTEXT = RowContext()


def build_row(
    input_tokens: int, prefix_score: float, load: PodLoad, ctx: RowContext | None = None
) -> list[float]:
    """One feature row in FEATURES order."""
    c = ctx or _NO_CONTEXT
    prefix_score = min(1.0, max(0.0, prefix_score))
    waiting = load.waiting + load.unseen_requests
    backlog_ms = max(0.0, c.backlog_s) * 1000.0
    service_ms = max(0.0, c.service_s) * 1000.0
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
        float(c.max_tokens),
        backlog_ms,
        service_ms,
        backlog_ms + service_ms,
        float(c.protected_decodes),
        float(waiting + load.running + 1.0),
        float(c.gateway_queued),
    ]


def select(row: list[float], columns: tuple[int, ...]) -> list[float]:
    return [row[i] for i in columns]
