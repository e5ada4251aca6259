"""Validation of training samples beyond their schema: absurd values never reach the window.

:func:`decode_sample` turns message bytes into a :class:`TrainingSample` or a rejection
reason (the schema's reasons, ``nan`` for NaN/Infinity literals in the JSON); :func:`check`
applies plausibility limits and returns a reason or None. Reasons are short, bounded tags
(the trainer counts rejections by reason).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.features import FEATURES
from shared.schemas import SchemaError, TrainingSample

_COL = {name: i for i, name in enumerate(FEATURES)}
_COUNT_COLUMNS = tuple(
    _COL[n]
    for n in (
        "input_token_length",
        "num_request_waiting",
        "num_request_running",
        "prefill_tokens_in_flight",
        "decode_tokens_in_flight",
        "effective_input_tokens",
    )
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Plausibility limits; anything beyond is a broken measurement, not a slow request."""

    max_latency_ms: float = 3_600_000.0  # TTFT and E2E: one hour
    max_tpot_ms: float = 60_000.0  # one minute per output token
    max_tokens: float = 10_000_000.0  # prompt / output / in-flight tokens
    max_requests: float = 1_000_000.0  # waiting / running requests on a pod
    max_future_s: float = 3600.0  # sample timestamp ahead of the trainer's clock


def decode_sample(data: bytes) -> TrainingSample | str:
    """The sample, or the rejection reason."""
    try:
        return TrainingSample.decode(data)
    except SchemaError as e:
        if e.reason == "not_json" and (b"NaN" in data or b"Infinity" in data):
            return "nan"
        return e.reason


def check(s: TrainingSample, limits: Limits, now: float | None = None) -> str | None:
    """None if the (schema-valid) sample is plausible, else the reason."""
    if s.ts <= 0 or (now is not None and s.ts > now + limits.max_future_s):
        return "absurd_ts"
    if s.e2e_ms <= 0 or s.e2e_ms > limits.max_latency_ms:
        return "absurd_e2e"
    if s.ttft_ms is not None:
        if s.ttft_ms > limits.max_latency_ms:
            return "absurd_ttft"
        if s.ttft_ms > s.e2e_ms * 1.001 + 1.0:
            return "ttft_after_e2e"
    if s.tpot_ms is not None and s.tpot_ms > limits.max_tpot_ms:
        return "absurd_tpot"
    if s.input_tokens < 0 or s.output_tokens < 0:
        return "negative"
    if s.input_tokens > limits.max_tokens or s.output_tokens > limits.max_tokens:
        return "absurd_tokens"
    f = s.features
    for c in _COUNT_COLUMNS:
        if f[c] < 0:
            return "negative"
        if f[c] > limits.max_tokens:
            return "absurd_feature"
    if f[_COL["num_request_waiting"]] > limits.max_requests:
        return "absurd_feature"
    if f[_COL["num_request_running"]] > limits.max_requests:
        return "absurd_feature"
    if not 0.0 <= f[_COL["kv_cache_percentage"]] <= 1.0:
        return "absurd_feature"
    if not 0.0 <= f[_COL["prefix_cache_score"]] <= 1.0:
        return "absurd_feature"
    if f[_COL["is_queued"]] not in (0.0, 1.0):
        return "absurd_feature"
    if f[_COL["prefix_score_bucket"]] not in (0.0, 1.0, 2.0, 3.0):
        return "absurd_feature"
    if f[_COL["pod_type"]] not in (0.0, 1.0, 2.0):
        return "absurd_feature"
    for name in ("predicted_ttft_ms", "predicted_tpot_ms"):
        v = getattr(s, name)
        if v is not None and v < 0:
            return "negative"
    return None
