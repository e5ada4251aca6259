"""Live prediction error: rolling MAPE of served predictions against measured latencies (pure).

The gateway copies the predicted TTFT/TPOT and the model version of the chosen pod into each
training sample; comparing them with what was measured shows drift (a model that no longer
fits the traffic) long before the next holdout evaluation. Both the trainer and the gateway
feed completed requests into a :class:`DriftTracker` and export ``mape(target)`` as a gauge.

Bounded memory (``size`` most recent errors per target), O(1) per observation, no clock.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

MAPE_FLOOR_MS = 1.0  # same floor as shared.latency_model: a 0 ms label counts as 1 ms


class RollingMape:
    """Mean absolute percentage error over the last ``size`` (predicted, actual) pairs."""

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self._errors: deque[float] = deque()
        self._sum = 0.0
        self._since_resum = 0
        self.observed_total = 0

    def observe(self, predicted: float | None, actual: float | None) -> bool:
        """Record one pair; False (ignored) if either is missing, non-finite or negative."""
        if predicted is None or actual is None:
            return False
        if not (math.isfinite(predicted) and math.isfinite(actual)):
            return False
        if predicted < 0 or actual < 0:
            return False
        err = abs(predicted - actual) / max(actual, MAPE_FLOOR_MS)
        self._errors.append(err)
        self._sum += err
        if len(self._errors) > self.size:
            self._sum -= self._errors.popleft()
        self._since_resum += 1
        if self._since_resum >= self.size:  # bound floating-point drift of the running sum
            self._sum = math.fsum(self._errors)
            self._since_resum = 0
        self.observed_total += 1
        return True

    @property
    def count(self) -> int:
        return len(self._errors)

    @property
    def mape(self) -> float | None:
        """The rolling MAPE as a fraction (0.05 = 5%), None before any observation."""
        return max(self._sum, 0.0) / len(self._errors) if self._errors else None


class DriftTracker:
    """One :class:`RollingMape` per target, plus the model version last seen per target.

    Usage (gateway or trainer), once per completed request::

        tracker.observe("ttft", sample.predicted_ttft_ms, sample.ttft_ms, sample.model_version)
        gauge.labels(target="ttft").set(tracker.mape("ttft"))  # when not None
    """

    def __init__(self, targets: tuple[str, ...] = ("ttft", "tpot"), size: int = 1000) -> None:
        self._rolling = {t: RollingMape(size) for t in targets}
        self.versions: dict[str, str | None] = dict.fromkeys(targets)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self._rolling)

    def observe(
        self,
        target: str,
        predicted: float | None,
        actual: float | None,
        model_version: str | None = None,
    ) -> bool:
        r = self._rolling.get(target)
        if r is None or not r.observe(predicted, actual):
            return False
        self.versions[target] = model_version
        return True

    def observe_sample(self, sample: object) -> list[str]:
        """Observe a TrainingSample's predicted vs measured TTFT and TPOT; returns the
        targets that changed."""
        version = getattr(sample, "model_version", None)
        changed = []
        for target in self.targets:
            predicted = getattr(sample, f"predicted_{target}_ms", None)
            actual = getattr(sample, f"{target}_ms", None)
            if self.observe(target, predicted, actual, version):
                changed.append(target)
        return changed

    def mape(self, target: str) -> float | None:
        r = self._rolling.get(target)
        return r.mape if r is not None else None

    def count(self, target: str) -> int:
        r = self._rolling.get(target)
        return r.count if r is not None else 0


class ShiftDetector:
    """Notices a workload shift from live prediction error and says when it began (pure).

    Fed the absolute percentage error of each served prediction (one target, e.g. TTFT) in
    completion order with the sample's time. It keeps a level of the last ``short`` errors
    (``statistic``: their mean, or their median) and a slow reference level (an exponential
    average of that level, with the memory of ``reference_memory`` observations). When the
    recent level exceeds ``ratio`` times the reference over a full window, :meth:`observe`
    returns the time of the oldest
    error in that window (where the shift began, at the latest): the trainer then forgets
    the samples before it and refits on the recent window. After a shift the detector
    starts over: the reference is re-learned from the new traffic once ``short`` more errors
    arrived, so a model still adapting does not trigger again and again.

    The median ignores a burst: under a burst the TTFT of the requests queued behind it is
    under-predicted several-fold, and a few hundred percent on a minority of the window lift
    its mean past the ratio on stationary traffic (docs/benchmarks.md "Workload shift"); a
    shift moves the error of most requests, hence the median.
    """

    def __init__(
        self,
        short: int = 200,
        ratio: float = 1.5,
        reference_memory: int = 2000,
        statistic: str = "mean",
    ) -> None:
        if short < 2 or ratio <= 1.0 or reference_memory < 1:
            raise ValueError("short >= 2, ratio > 1 and reference_memory >= 1 required")
        if statistic not in ("mean", "median"):
            raise ValueError("statistic must be mean or median")
        self.short = short
        self.ratio = ratio
        self.alpha = 1.0 / reference_memory
        self.statistic = statistic
        self._errors: deque[tuple[float, float]] = deque()  # (ts, ape)
        self._sorted: list[float] = []  # the window's errors, sorted (median)
        self._sum = 0.0
        self.reference: float | None = None
        self.shifts: list[float] = []  # when detected shifts began
        self.level_at_shift: float | None = None  # recent MAPE when the last one was seen

    @property
    def recent(self) -> float | None:
        if not self._errors:
            return None
        if self.statistic == "median":
            v, n = self._sorted, len(self._sorted)
            return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
        return max(self._sum, 0.0) / len(self._errors)

    def observe(self, predicted: float | None, actual: float | None, ts: float) -> float | None:
        """Record one pair; returns the shift's start time when one is detected now."""
        if predicted is None or actual is None:
            return None
        if not (math.isfinite(predicted) and math.isfinite(actual)) or actual < 0:
            return None
        ape = abs(predicted - actual) / max(actual, MAPE_FLOOR_MS)
        self._errors.append((ts, ape))
        self._sum += ape
        median = self.statistic == "median"
        if median:
            bisect.insort(self._sorted, ape)
        if len(self._errors) > self.short:
            old = self._errors.popleft()[1]
            self._sum -= old
            if median:
                del self._sorted[bisect.bisect_left(self._sorted, old)]
        if len(self._errors) < self.short:
            return None
        recent = self.recent
        assert recent is not None
        ref = self.reference
        if ref is None:
            self.reference = recent
            return None
        if recent > self.ratio * ref:
            began = self._errors[0][0]
            self.shifts.append(began)
            self.level_at_shift = recent
            self._errors.clear()
            self._sorted.clear()
            self._sum = 0.0
            self.reference = None
            return began
        self.reference = ref + self.alpha * (recent - ref)
        return None
