"""The one feature builder: a feature row per (request, candidate pod).

The gateway builds these rows for prediction, stores the chosen pod's row with the routed
request and publishes exactly that row as the training sample; the trainer, predictor and
routing lab all index rows by the column lists below. Changing a column means bumping
FEATURE_SCHEMA_VERSION (samples carry it and are validated against it).

Schema 2 = llm-d's eleven (schema 1, unchanged, first) + the pod view's own estimates;
schema 3 = schema 2 (unchanged, first) + the pod's hardware class.
Columns 0-10 follow llm-d's predictor (see docs/architecture.md); a model names the
columns it reads (ModelSpec ``features``): ``v1`` = llm-d's sets (TTFT: columns 0-10; TPOT:
the first seven plus pod_type), ``v2`` = columns 0-17 for both targets, ``v3`` = every
column. Each schema only appends columns, so a v1 model reads the same first eleven columns
of a schema-3 row and a v2 model the first eighteen: models of every schema are served.

The v2 columns are what the gateway's analytic view already estimates (pure arithmetic on
state it holds, no extra I/O): the decode budget, the estimated prefill seconds queued
ahead of the request on the pod (``backlog``), the cost model's own prefill estimate for
the request there (``service``), their sum (the analytic TTFT), the decoding and queued
requests a prefill there would slow (``protected_decodes``), the decode batch the request
joins and the requests this gateway's flow-control queue holds (they reach the pods within
the request's lifetime: the near future).

The v3 column is the pod's hardware class (``PodRecord.hardware_class``: the pod's metric or
Kubernetes label) as a stable code (:func:`hardware_class_code`: the same on every gateway
replica, in the trainer and in the predictor, because the code is in the row the gateway
builds and the sample carries; 0 = unknown). llm-d's pools are homogeneous, so its eleven
columns carry no speed: one model averages the classes. The per-class cost model already
puts the prefill speed into ``service_ms``/``backlog_ms``; the class code lets the trees
also separate what the cost model does not estimate (decode speed, hence TPOT).
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

FEATURE_SCHEMA_VERSION = 3
# a schema-1 model reads columns 0-10 and a schema-2 model columns 0-17, unchanged in 3
SUPPORTED_MODEL_SCHEMAS = (1, 2, 3)

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

FEATURES_V2: tuple[str, ...] = (
    *FEATURES_V1,
    "max_tokens",  # the request's decode budget (max_tokens or the gateway default)
    "backlog_ms",  # estimated prefill queued ahead on the pod (pod view, cost model)
    "service_ms",  # the cost model's prefill estimate for this request's uncached part
    "estimate_ms",  # backlog + service: the analytic TTFT estimate
    "protected_decodes",  # decoding requests a prefill here would slow (pod view)
    "decode_batch",  # running + waiting (incl. unseen) + 1: the batch the request joins
    "gateway_queued",  # requests waiting in this gateway's flow-control queue
)

FEATURES: tuple[str, ...] = (
    *FEATURES_V2,
    "hardware_class",  # hardware_class_code(the pod's class); 0 = unknown
)

TTFT_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES_V1)))
TPOT_COLUMNS: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 10)
V2_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES_V2)))
ALL_COLUMNS: tuple[int, ...] = tuple(range(len(FEATURES)))
ESTIMATE_COLUMN = FEATURES.index("estimate_ms")

# feature set -> target -> columns (e2e uses TTFT's)
FEATURE_SETS: dict[str, dict[str, tuple[int, ...]]] = {
    "v1": {"ttft": TTFT_COLUMNS, "tpot": TPOT_COLUMNS, "e2e": TTFT_COLUMNS},
    "v2": {"ttft": V2_COLUMNS, "tpot": V2_COLUMNS, "e2e": V2_COLUMNS},
    "v3": {"ttft": ALL_COLUMNS, "tpot": ALL_COLUMNS, "e2e": ALL_COLUMNS},
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


_CODE_MASK = (1 << 24) - 1  # integers below 2**24 are exact in float32 (the wire's type)


@functools.lru_cache(maxsize=256)  # a pool has a handful of classes; one lookup per row
def hardware_class_code(hardware_class: str | None) -> float:
    """A hardware class as a feature value: a stable code of its name (CRC-32, 24 bits, so
    float32 carries it exactly; never 0), 0 for an unknown class. Stable across processes
    and versions (not Python's salted ``hash``), so every gateway replica writes the same
    value for the same class and a model fitted on one replica's samples reads another's."""
    name = (hardware_class or "").strip().lower()
    if not name:
        return 0.0
    return float((zlib.crc32(name.encode()) & _CODE_MASK) or 1)


def prefix_bucket(score: float) -> int:
    return min(3, max(0, int(score * 4)))


@dataclass(frozen=True, slots=True)
class RowContext:
    """The v2/v3 inputs of one (request, pod) row beyond the pod's load: the request's
    decode budget, the pod view's estimates for this pod, the gateway's queue and the pod's
    hardware class."""

    max_tokens: float = 0.0
    service_s: float = 0.0  # the cost model's prefill estimate for the request here
    backlog_s: float = 0.0  # estimated prefill seconds queued ahead on the pod
    protected_decodes: float = 0.0
    gateway_queued: float = 0.0
    hardware_class: str | None = None  # the pod's (v3 column)


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
        hardware_class_code(c.hardware_class),
    ]


def select(row: list[float], columns: tuple[int, ...]) -> list[float]:
    return [row[i] for i in columns]
