"""Versioned message schemas for everything that crosses NATS or Redis.

Every message is a JSON object (orjson) with a ``v`` field. Decoders validate at the edge and
raise :class:`SchemaError` naming the field; receivers count and drop (or answer with an
error) instead of crashing. docs/architecture.md lists the messages and their subjects.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, Self

import orjson

from shared.features import FEATURE_SCHEMA_VERSION, FEATURES


class SchemaError(ValueError):
    """A message does not match its schema; ``reason`` is a short machine-readable tag."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


_TYPES: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
}


class Message:
    """Mixin: JSON encode/decode with a version check and shallow type validation."""

    VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        d["v"] = self.VERSION
        return d

    def encode(self) -> bytes:
        """``orjson.dumps(self.to_dict())``. For the generic layout (fields in order, then
        ``v``) orjson serialises the dataclass itself: the same bytes, ~15x faster than
        going through ``asdict``."""
        if type(self).to_dict is Message.to_dict:
            body = orjson.dumps(self)
            if len(body) > 2:
                return body[:-1] + b',"v":%d}' % self.VERSION
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any) -> Self:
        if not isinstance(d, dict):
            raise SchemaError(f"{cls.__name__}: expected a JSON object", "not_object")
        v = d.get("v")
        if v != cls.VERSION:
            raise SchemaError(
                f"{cls.__name__}: unsupported schema version {v!r} (expected {cls.VERSION})",
                "schema_version",
            )
        kwargs = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name not in d:
                if f.default is not MISSING or f.default_factory is not MISSING:
                    continue
                raise SchemaError(f"{cls.__name__}: missing field {f.name!r}", "missing_field")
            kwargs[f.name] = d[f.name]
        obj = cls(**kwargs)
        obj.validate()
        return obj

    @classmethod
    def decode(cls, data: bytes) -> Self:
        try:
            d = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise SchemaError(f"{cls.__name__}: not JSON: {e}", "not_json") from e
        return cls.from_dict(d)

    def validate(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            val = getattr(self, f.name)
            _check_type(type(self).__name__, f.name, val, f.type)


def _check_type(owner: str, name: str, val: Any, annotation: Any) -> None:
    ann = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    optional = "None" in ann
    if val is None:
        if optional:
            return
        raise SchemaError(f"{owner}: field {name!r} must not be null", "bad_type")
    base = ann.replace(" | None", "").strip()
    if base == "float" and not _finite(val):
        raise SchemaError(f"{owner}: field {name!r} must be a finite number", "bad_value")
    if base == "int" and (not isinstance(val, int) or isinstance(val, bool)):
        raise SchemaError(f"{owner}: field {name!r} must be an integer", "bad_type")
    if base == "str" and not isinstance(val, str):
        raise SchemaError(f"{owner}: field {name!r} must be a string", "bad_type")
    if base == "bool" and not isinstance(val, bool):
        raise SchemaError(f"{owner}: field {name!r} must be a boolean", "bad_type")
    if base.startswith("list") and not isinstance(val, list):
        raise SchemaError(f"{owner}: field {name!r} must be a list", "bad_type")
    if base.startswith("dict") and not isinstance(val, dict):
        raise SchemaError(f"{owner}: field {name!r} must be an object", "bad_type")


def _finite_list(owner: str, name: str, xs: list[Any]) -> None:
    for x in xs:
        if not _finite(x):
            raise SchemaError(f"{owner}: {name} must hold finite numbers", "bad_value")


# --------------------------------------------------------------------------------------
# Collector -> gateway
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class PodRecord(Message):
    """One pod's scraped state (engine-neutral)."""

    name: str
    url: str
    ready: bool
    scraped_at: float  # unix seconds of the last scrape attempt that produced this record
    models: list[str] = field(default_factory=list)
    engine: str = "vllm"
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # 0..1
    prefix_hit_rate: float = 0.0  # 0..1, lifetime hits / queries
    error: str | None = None
    lora_adapters: list[str] = field(default_factory=list)  # running LoRA adapters
    prefill_backlog: float | None = None  # requests waiting for prefill (JetStream's backlog)
    slots_used: float | None = None  # batch-slot fullness 0..1 where the engine reports it
    kv_capacity_tokens: float | None = None  # KV-cache capacity in tokens, where reported
    max_model_len: int | None = None  # context length (prompt + output), where reported
    # why the record is not ready, machine-readable: the collector's scrape failure reason
    # (services/collector/scraper.py: timeout, connect, http_error, ...) or "pending"
    error_reason: str | None = None
    # the pod's hardware class (e.g. nvidia-h100-80gb), from its Kubernetes label or its
    # headroom_hardware_info metric; None: unknown (one class for the whole pool)
    hardware_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PodSnapshot(Message):
    pool: str
    ts: float
    pods: list[PodRecord]

    def to_dict(self) -> dict[str, Any]:
        return {"v": self.VERSION, "pool": self.pool, "ts": self.ts,
                "pods": [p.to_dict() for p in self.pods]}  # fmt: skip

    @staticmethod
    def _pod(d: Any) -> PodRecord:
        if not isinstance(d, dict):
            raise SchemaError("PodRecord: expected an object", "not_object")
        names = {f.name for f in fields(PodRecord)}
        unknown = set(d) - names
        if unknown:
            d = {k: v for k, v in d.items() if k in names}  # forward compatible
        try:
            p = PodRecord(**d)
        except TypeError as e:
            raise SchemaError(f"PodRecord: {e}", "missing_field") from e
        p.validate()
        return p

    @classmethod
    def from_dict(cls, d: Any) -> PodSnapshot:
        if not isinstance(d, dict) or d.get("v") != cls.VERSION:
            raise SchemaError("PodSnapshot: bad or unsupported message", "schema_version")
        pods = d.get("pods")
        if not isinstance(pods, list):
            raise SchemaError("PodSnapshot: pods must be a list", "bad_type")
        snap = cls(pool=d.get("pool"), ts=d.get("ts"), pods=[cls._pod(p) for p in pods])
        _check_type("PodSnapshot", "pool", snap.pool, "str")
        _check_type("PodSnapshot", "ts", snap.ts, "float")
        return snap


# --------------------------------------------------------------------------------------
# Gateway <-> predictor (request-reply)
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class PredictRequest(Message):
    rows: list[list[float]]
    feature_schema: int = FEATURE_SCHEMA_VERSION

    def validate(self) -> None:
        super(PredictRequest, self).validate()
        if self.feature_schema != FEATURE_SCHEMA_VERSION:
            raise SchemaError(
                f"PredictRequest: feature schema {self.feature_schema} not supported "
                f"(expected {FEATURE_SCHEMA_VERSION})",
                "feature_schema",
            )
        for r in self.rows:
            if not isinstance(r, list) or len(r) != len(FEATURES):
                raise SchemaError(
                    f"PredictRequest: each row must have {len(FEATURES)} features", "bad_row"
                )
            _finite_list("PredictRequest", "rows", r)


PREDICT_OK = "ok"
PREDICT_NOT_READY = "not_ready"
PREDICT_ERROR = "error"


@dataclass(slots=True)
class PredictReply(Message):
    status: str  # ok | not_ready | error
    model_version: str | None = None
    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    error: str | None = None
    replica: str | None = None  # which predictor replica answered

    def validate(self) -> None:
        super(PredictReply, self).validate()
        if self.status not in (PREDICT_OK, PREDICT_NOT_READY, PREDICT_ERROR):
            raise SchemaError(f"PredictReply: unknown status {self.status!r}", "bad_value")
        if self.status == PREDICT_OK:
            if len(self.ttft_ms) != len(self.tpot_ms):
                raise SchemaError("PredictReply: ttft_ms and tpot_ms lengths differ", "bad_row")
            _finite_list("PredictReply", "ttft_ms", self.ttft_ms)
            _finite_list("PredictReply", "tpot_ms", self.tpot_ms)


# --------------------------------------------------------------------------------------
# Gateway -> trainer (JetStream)
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class TrainingSample(Message):
    """A completed request: the exact feature row used for the chosen pod plus what happened."""

    request_id: str
    pool: str
    pod: str
    model: str
    features: list[float]
    e2e_ms: float
    input_tokens: int
    output_tokens: int
    streaming: bool
    ts: float
    ttft_ms: float | None = None  # first streamed token (None if not measured)
    tpot_ms: float | None = None  # (e2e - ttft) / (output chunks - 1), None if < 2 chunks
    routing: str = "fallback"  # what ranked the pods: predicted | cost-model | heuristic | fallback
    model_version: str | None = None  # model that made the prediction, if any
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    feature_schema: int = FEATURE_SCHEMA_VERSION

    def validate(self) -> None:
        super(TrainingSample, self).validate()
        if self.feature_schema != FEATURE_SCHEMA_VERSION:
            raise SchemaError("TrainingSample: unknown feature schema", "feature_schema")
        if len(self.features) != len(FEATURES):
            raise SchemaError("TrainingSample: wrong number of features", "bad_row")
        _finite_list("TrainingSample", "features", self.features)
        for name in ("e2e_ms", "ttft_ms", "tpot_ms"):
            val = getattr(self, name)
            if val is not None and val < 0:
                raise SchemaError(f"TrainingSample: {name} is negative", "negative")


# --------------------------------------------------------------------------------------
# Trainer -> predictors
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class ModelAnnouncement(Message):
    version: str
    created_at: float


@dataclass(slots=True)
class ModelMeta(Message):
    """Metadata stored next to a model version's blobs in Redis (field ``meta``)."""

    version: str
    created_at: float
    samples: int
    feature_schema: int
    # model key ("ttft", "tpot", "e2e", "ttft_p90", ...) -> {"sha256": hex, "columns": [feature
    # indices], "format": "ubj"} plus (optional) "target", "objective", "quantile_alpha",
    # "transform", "features", "loss", "level", "base", "shift" (shared.latency_model.ModelSpec;
    # a reader older than "shift" serves that quantile model uncalibrated)
    targets: dict[str, Any]
    # model key -> {"mape", "mae", "n"/"holdout", "samples"; quantile keys also "coverage",
    # "pinball"}: the candidate's holdout evaluation
    metrics: dict[str, Any] = field(default_factory=dict)
    # Additive (all optional; older readers ignore them):
    # how the window's strata were filled: {"buckets_total", "buckets_filled", "features":
    # {feature: [samples per bucket]}, "max_bucket"}
    bucket_coverage: dict[str, Any] = field(default_factory=dict)
    # the promotion check: {"holdout", "compared_with", "current": {key: metrics},
    # "margin", "decision", "reason"}
    evaluation: dict[str, Any] = field(default_factory=dict)
    # newest sample timestamp (unix s) the model trained on; None for imported models
    trained_until: float | None = None
    source: str = "trainer"  # trainer | import
    # fit parameters (rounds, max_depth, eta, objective, quantile_alpha) and, for imported
    # models, where they came from (imported_from)
    params: dict[str, Any] = field(default_factory=dict)
