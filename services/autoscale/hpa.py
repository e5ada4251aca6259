"""The Horizontal Pod Autoscaler's replica arithmetic (pure; time is passed in).

What ``kube-controller-manager`` does for one metric of an ``autoscaling/v2`` HPA:

1. ratio = metric / target; if ``|ratio - 1| <= tolerance`` (default 0.1) keep the current
   replica count, else ``desired = ceil(current * ratio)``
   (for an External metric with a ``Value`` target, or a Pods/``AverageValue`` target where
   ``metric`` is the per-pod average);
2. clamp to ``[minReplicas, maxReplicas]``;
3. stabilise: remember every recommendation with its time; the result may not go above the
   smallest recommendation within the scale-up window (default 0 s) nor below the largest
   within the scale-down window (default 300 s);
4. rate-limit per policy: by default a scale-up adds at most max(100 %, 4 pods) per 15 s,
   a scale-down may remove 100 % per 15 s (so it is not limited beyond the window).

:func:`desired_replicas` is step 1, :class:`Stabilizer` steps 2-4 (one per HPA metric):
``Decision.recommended`` is where HPA settles while the signal stays as it is (what the
collector's gauge and the CLI report), ``Decision.next_step`` the count one period later.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

DEFAULT_TOLERANCE = 0.1


def desired_replicas(
    current: int, metric: float, target: float, tolerance: float = DEFAULT_TOLERANCE
) -> int:
    """HPA's formula: ``ceil(current * metric / target)``, or ``current`` inside the
    tolerance band. ``current`` 0 means scaling is disabled (HPA leaves it at 0)."""
    if target <= 0:
        raise ValueError("target must be positive")
    if not math.isfinite(metric) or metric < 0:
        raise ValueError(f"metric must be a finite non-negative number, got {metric!r}")
    if current <= 0:
        return 0
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    # HPA computes in float64 and ceils; guard against 2.0000000000000004-style noise
    return math.ceil(round(current * ratio, 9))


@dataclass(frozen=True, slots=True)
class Behavior:
    """The HPA spec fields that shape the result (defaults are Kubernetes' defaults)."""

    min_replicas: int = 1
    max_replicas: int = 100
    tolerance: float = DEFAULT_TOLERANCE
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    scale_up_percent: float = 100.0  # per period
    scale_up_pods: int = 4  # per period
    scale_down_percent: float = 100.0  # per period
    period_s: float = 15.0

    def __post_init__(self) -> None:
        if not 0 < self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 < min_replicas <= max_replicas")
        if self.tolerance < 0 or self.scale_up_window_s < 0 or self.scale_down_window_s < 0:
            raise ValueError("tolerance and windows must be >= 0")

    def clamp(self, n: int) -> int:
        return min(self.max_replicas, max(self.min_replicas, n))

    def scale_up_limit(self, current: int) -> int:
        return max(
            math.ceil(current * (1 + self.scale_up_percent / 100)), current + self.scale_up_pods
        )

    def scale_down_limit(self, current: int) -> int:
        return max(0, math.ceil(current * (1 - self.scale_down_percent / 100)))


@dataclass(slots=True)
class Decision:
    current: int
    desired: int  # step 1 (formula and tolerance)
    recommended: int  # steps 2-3: where HPA settles (clamped and stabilised)
    next_step: int  # step 4: the count after the next period (rate limits applied)
    limited_by: str = ""  # "", "min", "max", "scale-up window", "scale-down window"


@dataclass(slots=True)
class Stabilizer:
    """Steps 2-4 for one metric; keeps the recommendations of the longest window."""

    behavior: Behavior = field(default_factory=Behavior)
    _history: deque[tuple[float, int]] = field(default_factory=deque)

    def recommend(self, now: float, current: int, metric: float, target: float) -> Decision:
        b = self.behavior
        desired = desired_replicas(current, metric, target, b.tolerance)
        if current <= 0:
            return Decision(current, 0, 0, 0, "scaling disabled (0 replicas)")
        clamped = b.clamp(desired)
        reason = "" if clamped == desired else ("min" if clamped > desired else "max")
        keep = max(b.scale_up_window_s, b.scale_down_window_s)
        while self._history and self._history[0][0] < now - keep:
            self._history.popleft()
        up, down = clamped, clamped
        for t, rec in self._history:
            if t > now - b.scale_up_window_s:
                up = min(up, rec)
            if t > now - b.scale_down_window_s:
                down = max(down, rec)
        self._history.append((now, clamped))
        rec = max(current, up)  # scale up no further than every recent recommendation allows
        rec = min(rec, down)  # scale down no further than every recent one allows
        if rec > clamped:
            reason = "scale-down window"
        elif rec < clamped:
            reason = "scale-up window"
        rec = b.clamp(rec)
        step = rec
        if rec > current:
            step = min(rec, b.scale_up_limit(current))
        elif rec < current:
            step = max(rec, b.scale_down_limit(current))
        return Decision(current, desired, rec, step, reason)
