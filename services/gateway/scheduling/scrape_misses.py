"""Which record the pod view keeps for a pod whose scrape failed. Pure (no I/O, no clock).

The collector publishes a failed scrape as a not-ready record with a machine-readable
``error_reason`` (services/collector/scraper.py). One slow scrape must not take a serving
pod out of rotation (a pod busy tokenizing a huge prompt answers /metrics late, yet decodes
fine), so:

- a **connection failure** (``connect``: refused, unreachable, DNS) makes the pod not ready
  at once: nothing listens there;
- any other failure (``timeout``, ``http_error`` such as a reset mid-response, a bad page) is
  a **miss**: a pod that was ready and served this gateway recently (the caller says; the
  view's rule: a request of it decodes now, or had its first token within
  ``served_recently_s``) keeps its last good record through ``tolerated`` consecutive
  misses, routed on the gateway's own counts (the view treats the kept record as stale);
  the next miss, a pod that stopped serving, or a connection failure make it not ready;
- a not-ready record without a reason (a collector older than ``error_reason``, or a record
  built by hand) is taken as it is, and a pod that never was ready stays as reported.

Misses are counted per failed scrape (a new ``scraped_at``), not per snapshot: the
collector repeats a pod's latest record in every snapshot until its next scrape ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shared.schemas import PodRecord

CONNECTION_FAILURES = frozenset({"connect"})


@dataclass(slots=True)
class _PodState:
    good: PodRecord  # the last ready record
    misses: int = 0
    last_miss_at: float | None = None  # scraped_at of the last miss counted


class ScrapeMisses:
    def __init__(self, tolerated: int = 3) -> None:
        self.tolerated = tolerated
        self._pods: dict[str, _PodState] = {}
        self.kept: set[str] = set()  # pods whose last good record stands in for a miss

    def admit(self, rec: PodRecord, served_recently: bool) -> PodRecord:
        """The record to keep for ``rec.name``: ``rec`` itself, or the pod's last good one
        (then the pod is in :attr:`kept`)."""
        name = rec.name
        if rec.ready:
            st = self._pods.get(name)
            if st is None:
                self._pods[name] = _PodState(rec)
            else:
                st.good, st.misses, st.last_miss_at = rec, 0, None
            self.kept.discard(name)
            return rec
        st = self._pods.get(name)
        if st is not None and rec.error_reason is not None:
            if rec.error_reason not in CONNECTION_FAILURES and served_recently:
                if rec.scraped_at != st.last_miss_at:
                    st.misses += 1
                    st.last_miss_at = rec.scraped_at
                if st.misses <= self.tolerated:
                    self.kept.add(name)
                    return st.good
        self._pods.pop(name, None)
        self.kept.discard(name)
        return rec

    def misses(self, pod: str) -> int:
        st = self._pods.get(pod)
        return st.misses if st is not None else 0

    def retain(self, pods: Iterable[str]) -> None:
        """Forget the pods not in ``pods`` (they left the snapshot)."""
        keep = set(pods)
        for name in [n for n in self._pods if n not in keep]:
            del self._pods[name]
        self.kept &= keep
