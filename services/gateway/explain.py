"""Decision explanation: response headers saying where a request went and why (pure).

Always: ``x-headroom-pod``, ``x-headroom-routing`` (what ranked the pods: predicted |
cost-model | heuristic | fallback),
``x-headroom-profile``, ``x-headroom-fallback-reason``, ``x-headroom-model-version`` and the
chosen pod's ``x-headroom-predicted-ttft-ms`` / ``x-headroom-predicted-tpot-ms`` (when the
predictors answered), plus ``x-headroom-trace-id`` when the request is traced.

With ``x-headroom-debug: 1`` on the request: ``x-headroom-candidates``, one entry per
candidate pod, best first (``pod;score=…;ttft_ms=…;tpot_ms=…;prefix=…``, entries separated by
``", "``; a pod the filters removed has no score), and ``x-headroom-notes``, the plugins'
notes for this decision (``key=value; …``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

DEBUG_HEADER = "x-headroom-debug"
_TRUE = frozenset({"1", "true", "yes", "on"})
_UNSAFE = re.compile(r"[^\x20-\x7e]")  # header values: printable ASCII only
MAX_NOTES_CHARS = 2000


class _Prediction(Protocol):
    ttft_ms: float
    tpot_ms: float


class _Candidate(Protocol):
    name: str


class _Routed(Protocol):
    candidate: _Candidate
    prefix_score: float
    prediction: _Prediction | None
    score: float | None


def wants_debug(headers: Mapping[str, str]) -> bool:
    return headers.get(DEBUG_HEADER, "").strip().lower() in _TRUE


def _num(x: float) -> str:
    return f"{x:.4g}"


def _ms(x: float) -> str:
    return f"{x:.1f}"


def decision_headers(
    request_id: str,
    pod: str,
    *,
    path: str,
    profile: str = "",
    reason: str | None = None,
    model_version: str | None = None,
    prediction: _Prediction | None = None,
    trace_id: str | None = None,
) -> dict[str, str]:
    h = {"x-request-id": request_id, "x-headroom-pod": pod, "x-headroom-routing": path}
    if profile:
        h["x-headroom-profile"] = profile
    if reason:
        h["x-headroom-fallback-reason"] = reason
    if model_version:
        h["x-headroom-model-version"] = model_version
    if prediction is not None:
        h["x-headroom-predicted-ttft-ms"] = _ms(prediction.ttft_ms)
        h["x-headroom-predicted-tpot-ms"] = _ms(prediction.tpot_ms)
    if trace_id:
        h["x-headroom-trace-id"] = trace_id
    return h


def candidates_header(ranked: Sequence[_Routed]) -> str:
    """``pod;score=…;ttft_ms=…;tpot_ms=…;prefix=…`` per candidate, best first."""
    entries = []
    for r in ranked:
        parts = [_UNSAFE.sub("?", r.candidate.name)]
        if r.score is not None:
            parts.append(f"score={_num(r.score)}")
        if r.prediction is not None:
            parts.append(f"ttft_ms={_ms(r.prediction.ttft_ms)}")
            parts.append(f"tpot_ms={_ms(r.prediction.tpot_ms)}")
        parts.append(f"prefix={_num(r.prefix_score)}")
        entries.append(";".join(parts))
    return ", ".join(entries)


def notes_header(notes: Mapping[str, object]) -> str:
    text = "; ".join(f"{k}={v}" for k, v in notes.items())
    return _UNSAFE.sub("?", text)[:MAX_NOTES_CHARS]


def debug_headers(ranked: Sequence[_Routed], notes: Mapping[str, object] | None) -> dict[str, str]:
    h = {"x-headroom-candidates": candidates_header(ranked)}
    if notes:
        h["x-headroom-notes"] = notes_header(notes)
    return h
