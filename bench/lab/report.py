"""The run report shared by `headroom lab` and `headroom replay` (one JSON object per run).

Metric definitions follow vLLM's benchmark_serving (docs/benchmarks.md):
- TTFT: request sent to its first token; TPOT: (e2e - ttft) / (output tokens - 1), only for
  requests with at least 2 output tokens; E2E: request sent to its last token.
- duration: first arrival to the last completion;
  throughput = completed requests (and their output tokens) per second of duration.
- A request *meets the SLOs* when it completed, its TTFT <= the TTFT SLO (if given) and its
  TPOT <= the TPOT SLO (if given; a 1-token answer has no TPOT and cannot miss it).
  attainment = requests meeting the SLOs / all requests (rejected and failed ones miss);
  goodput_rps = requests meeting the SLOs / duration.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

OK, REJECTED, FAILED, PENDING = "ok", "rejected", "failed", "pending"


@dataclass(slots=True)
class RequestRecord:
    """What happened to one trace request (times in seconds on the run's clock)."""

    index: int
    arrival_s: float
    input_tokens: int
    max_tokens: int
    status: str = PENDING  # ok | rejected | failed | pending
    pod: str | None = None
    path: str | None = None  # predicted | cost-model | heuristic | fallback
    model_version: str | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    output_tokens: int = 0
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    p90_ttft_ms: float | None = None  # the quantile model's prediction, when there is one
    p90_tpot_ms: float | None = None
    trained_samples: int = 0  # samples the trainer had accepted when this was routed
    twin_ttft_ms: float | None = None  # the twin learner's prediction for the chosen pod
    twin_tpot_ms: float | None = None
    error: str | None = None
    dispatched_s: float | None = None  # sent to its pod (after any wait in the gateway)

    def __deepcopy__(self, memo: dict) -> RequestRecord:
        # every field is a number, a string or None: a shallow copy is a deep one (and the
        # lab's whole-run copies, bench/lab/rollout.py, make many)
        return copy.copy(self)

    def _from_dispatch(self, ms: float | None) -> float | None:
        """A latency from the request being sent, counted from its dispatch instead."""
        if ms is None or self.dispatched_s is None:
            return ms
        return ms - (self.dispatched_s - self.arrival_s) * 1000.0

    @property
    def pod_ttft_ms(self) -> float | None:
        """TTFT from the dispatch to the pod, as the gateway measures it for training samples
        and predictions (the request's own wait in the gateway's queue excluded)."""
        return self._from_dispatch(self.ttft_ms)

    @property
    def pod_e2e_ms(self) -> float | None:
        return self._from_dispatch(self.e2e_ms)

    @property
    def ttft_ms(self) -> float | None:
        if self.status != OK or self.first_token_s is None:
            return None
        return (self.first_token_s - self.arrival_s) * 1000.0

    @property
    def e2e_ms(self) -> float | None:
        if self.status != OK or self.finished_s is None:
            return None
        return (self.finished_s - self.arrival_s) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        ttft, e2e = self.ttft_ms, self.e2e_ms
        if ttft is None or e2e is None or self.output_tokens < 2:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)

    def meets(self, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
        if self.status != OK:
            return False
        if slo_ttft_ms is not None:
            t = self.ttft_ms
            if t is None or t > slo_ttft_ms:
                return False
        if slo_tpot_ms is not None:
            t = self.tpot_ms
            if t is not None and t > slo_tpot_ms:
                return False
        return True


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def latency_stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99 (linear interpolation), rounded to microseconds; nulls if empty."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": _r(a.mean()), "p50": _r(p50), "p90": _r(p90), "p99": _r(p99)}


def mape(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Mean absolute percentage error of (predicted, actual) pairs (actual floored at 1 ms,
    as the trainer's evaluation does); None without pairs."""
    if not pairs:
        return None
    p = np.array([a for a, _ in pairs], dtype=np.float64)
    y = np.array([b for _, b in pairs], dtype=np.float64)
    return _r(float((np.abs(p - y) / np.maximum(np.abs(y), 1.0)).mean()), 5)


def coverage(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Share of (predicted quantile, actual) pairs with actual <= predicted."""
    if not pairs:
        return None
    return _r(sum(1 for p, y in pairs if y <= p) / len(pairs), 5)


def summarize(
    records: Sequence[RequestRecord],
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> dict:
    """The request-level part of the report: counts, latency stats, SLO, throughput."""
    done = [r for r in records if r.status == OK]
    ttft = [v for r in done if (v := r.ttft_ms) is not None]
    tpot = [v for r in done if (v := r.tpot_ms) is not None]
    e2e = [v for r in done if (v := r.e2e_ms) is not None]
    start = min((r.arrival_s for r in records), default=0.0)
    end = max((r.finished_s for r in done if r.finished_s is not None), default=start)
    duration = max(end - start, 1e-9)
    out_tokens = sum(r.output_tokens for r in done)
    has_slo = slo_ttft_ms is not None or slo_tpot_ms is not None
    slo: dict[str, float | None] = {
        "ttft_ms": slo_ttft_ms,
        "tpot_ms": slo_tpot_ms,
        "attainment": None,
        "goodput_rps": None,
    }
    if has_slo and records:
        good = sum(1 for r in records if r.meets(slo_ttft_ms, slo_tpot_ms))
        slo["attainment"] = _r(good / len(records), 5)
        slo["goodput_rps"] = _r(good / duration, 4)
    paths: dict[str, int] = {}
    for r in records:
        if r.path:
            paths[r.path] = paths.get(r.path, 0) + 1
    return {
        "requests": len(records),
        "completed": len(done),
        "rejected": sum(1 for r in records if r.status == REJECTED),
        "failed": sum(1 for r in records if r.status in (FAILED, PENDING)),
        "ttft_ms": latency_stats(ttft),
        "tpot_ms": latency_stats(tpot),
        "e2e_ms": latency_stats(e2e),
        "slo": slo,
        "throughput": {
            "requests_per_s": _r(len(done) / duration, 4),
            "output_tokens_per_s": _r(out_tokens / duration, 2),
        },
        "duration_s": _r(duration, 3),
        "routing": dict(sorted(paths.items())),
    }


def _pairs(rs: Sequence[RequestRecord], pred: str, actual: str) -> list[tuple[float, float]]:
    """(prediction, what happened) of the records that have both."""
    out = []
    for r in rs:
        p, y = getattr(r, pred), getattr(r, actual)
        if p is not None and y is not None:
            out.append((p, y))
    return out


def prediction_summary(
    records: Sequence[RequestRecord], *, after_samples: int
) -> dict[str, float | int | None]:
    """Prediction error of the chosen pods' predictions against what happened: over every
    predicted request, and over those routed once the trainer had ``after_samples`` samples
    (issue 5's "MAPE on the rest of the trace"); p90 coverage when quantile models served.
    TTFT is compared from the dispatch to the pod (what the models predict)."""
    done = [r for r in records if r.status == OK and r.predicted_ttft_ms is not None]
    after = [r for r in done if r.trained_samples >= after_samples]
    return {
        "ttft_mape": mape(_pairs(done, "predicted_ttft_ms", "pod_ttft_ms")),
        "tpot_mape": mape(_pairs(done, "predicted_tpot_ms", "tpot_ms")),
        "predicted_requests": len(done),
        "after_samples": after_samples,
        "requests_after": len(after),
        "ttft_mape_after": mape(_pairs(after, "predicted_ttft_ms", "pod_ttft_ms")),
        "tpot_mape_after": mape(_pairs(after, "predicted_tpot_ms", "tpot_ms")),
        "ttft_p90_coverage_after": coverage(_pairs(after, "p90_ttft_ms", "pod_ttft_ms")),
        "tpot_p90_coverage_after": coverage(_pairs(after, "p90_tpot_ms", "tpot_ms")),
    }


def twin_summary(records: Sequence[RequestRecord], *, after_samples: int) -> dict:
    """The routing model against a twin learner that saw the same samples (run_lab's
    ``llmd_twin``): both MAPEs over the same requests, those routed once the trainer had
    ``after_samples`` samples for which both predicted the chosen pod, and their ratio
    (routing model / twin; issue 15 done-means 1 asks <= 0.7)."""
    both = [
        r for r in records
        if r.status == OK and r.trained_samples >= after_samples
        and r.predicted_ttft_ms is not None and r.twin_ttft_ms is not None
    ]  # fmt: skip
    out: dict[str, float | int | None] = {"requests": len(both)}
    for target, actual in (("ttft", "pod_ttft_ms"), ("tpot", "tpot_ms")):
        ours, twin = f"predicted_{target}_ms", f"twin_{target}_ms"
        scored = [r for r in both if getattr(r, ours) is not None and getattr(r, twin) is not None]
        a = mape(_pairs(scored, ours, actual))
        b = mape(_pairs(scored, twin, actual))
        out[f"{target}_mape_after"] = a
        out[f"twin_{target}_mape_after"] = b
        out[f"{target}_ratio"] = round(a / b, 3) if a is not None and b else None
    return out
