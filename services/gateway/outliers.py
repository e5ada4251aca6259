"""Passive outlier ejection (pure: time is passed in): a pod whose requests fail is taken out
of the candidates for a while, so a pod that hangs, answers 5xx, sends garbage or cuts
streams costs one request (retried on the next-ranked pod when it failed before the first
byte) instead of every request routed to it until the next scrape says something.

A failure ejects the pod for ``base_s``; each further failure within its ejection or right
after it doubles the time, up to ``max_s``; a success resets it.

At most ``max_fraction`` (default half) of a request's candidates are left out at once, like
Envoy's ``max_ejection_percent``: when more have failed, the ones with the longest ejection
(repeat offenders), then the latest, stay out and the others are routed to again. Many pods
failing together says more about the load or the path to them than about the pods, and
emptying a pool down to its last pods would herd the whole load onto them. With one
candidate, or ``max_fraction`` 0, nothing is left out (a pool is never emptied by this).
Bounded: one entry per pod that failed, forgotten after ``max_s`` without a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


class _Named(Protocol):
    name: str


C = TypeVar("C", bound=_Named)


@dataclass(slots=True)
class _State:
    until: float
    span_s: float
    last_failure: float


class OutlierEjector:
    def __init__(self, base_s: float = 5.0, max_s: float = 60.0, max_fraction: float = 0.5) -> None:
        if base_s < 0 or max_s < base_s:
            raise ValueError("outliers: 0 <= base_s <= max_s")
        if not 0.0 <= max_fraction < 1.0:
            raise ValueError("outliers: 0 <= max_fraction < 1")
        self.base_s = base_s
        self.max_s = max_s
        self.max_fraction = max_fraction
        self._pods: dict[str, _State] = {}
        self.ejections = 0  # total, for metrics

    @property
    def enabled(self) -> bool:
        return self.base_s > 0

    def failed(self, pod: str, now: float) -> float:
        """A request to ``pod`` failed at ``now``; returns how long it is now ejected."""
        if not self.enabled:
            return 0.0
        st = self._pods.get(pod)
        if st is None or now - st.last_failure > st.span_s + self.base_s:
            span = self.base_s
        else:
            span = min(st.span_s * 2, self.max_s)
        self._pods[pod] = _State(now + span, span, now)
        self.ejections += 1
        self._forget_old(now)
        return span

    def succeeded(self, pod: str) -> None:
        if self._pods:
            self._pods.pop(pod, None)

    def ejected(self, pod: str, now: float) -> bool:
        st = self._pods.get(pod)
        return st is not None and now < st.until

    def filter(self, candidates: Sequence[C], now: float) -> Sequence[C]:
        """``candidates`` without the ejected pods, at most ``max_fraction`` of them."""
        if not self._pods:
            return candidates
        out = [c for c in candidates if self.ejected(c.name, now)]
        if not out:
            return candidates
        cap = int(self.max_fraction * len(candidates))
        if len(out) > cap:
            pods = self._pods
            out.sort(key=lambda c: (pods[c.name].span_s, pods[c.name].until), reverse=True)
            out = out[:cap]
        if not out:
            return candidates
        left_out = {c.name for c in out}
        return [c for c in candidates if c.name not in left_out]

    def ejected_now(self, now: float) -> list[str]:
        return sorted(p for p, st in self._pods.items() if now < st.until)

    def _forget_old(self, now: float) -> None:
        if len(self._pods) > 64:
            for p in [p for p, st in self._pods.items() if now - st.last_failure > self.max_s]:
                del self._pods[p]
