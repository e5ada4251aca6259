"""Where the gateway's memory goes, for the soak (``HEADROOM_GATEWAY_DEBUG_TRACEMALLOC``).

Off by default (tracing every allocation costs the gateway CPU and memory). With the setting
at N > 0 frames the gateway starts :mod:`tracemalloc` at start-up and serves, to loopback
clients only (anything else gets 404, as if the routes did not exist):

- ``POST /debug/tracemalloc/mark``: takes the baseline snapshot (e.g. after a warm-up);
- ``GET /debug/tracemalloc?top=K``: the K allocation sites (file:line, with N frames) that
  grew most since the mark, the totals traced now and at the mark, and the live objects
  per type that grew most (``gc``), so a leak (traced memory that keeps growing) can be told
  from allocator fragmentation (RSS grows, traced memory does not).
"""

from __future__ import annotations

import gc
import ipaddress
import linecache
import tracemalloc
from collections import Counter

_FILTERS = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, linecache.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<unknown>"),
)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _type_counts() -> Counter[str]:
    return Counter(type(o).__name__ for o in gc.get_objects())


class MemDebug:
    """tracemalloc snapshots of this process: a baseline (``mark``) and diffs against it."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self._mark: tracemalloc.Snapshot | None = None
        self._mark_types: Counter[str] = Counter()

    def start(self) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)

    def stop(self) -> None:
        self._mark = None
        if tracemalloc.is_tracing():
            tracemalloc.stop()

    def mark(self) -> dict:
        gc.collect()
        self._mark = tracemalloc.take_snapshot().filter_traces(_FILTERS)
        self._mark_types = _type_counts()
        traced, peak = tracemalloc.get_traced_memory()
        return {"traced_bytes": traced, "peak_bytes": peak}

    def diff(self, top: int = 30) -> dict:
        before_gc, _ = tracemalloc.get_traced_memory()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a full collection frees was garbage in cycles
        try:
            gc.collect()
            garbage = Counter(
                f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
            ).most_common(top)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        gc.collect()
        now = tracemalloc.take_snapshot().filter_traces(_FILTERS)
        traced, peak = tracemalloc.get_traced_memory()
        out: dict = {"traced_bytes": traced, "peak_bytes": peak, "frames": self.frames,
                     "cyclic_garbage_bytes": max(0, before_gc - traced),
                     "cyclic_garbage_types": dict(garbage)}  # fmt: skip
        types = _type_counts()
        if self._mark is None:
            stats = now.statistics("traceback")[:top]
            out["top"] = [_stat(s.traceback, s.size, s.size, s.count) for s in stats]
            return out
        out["traced_bytes_at_mark"] = sum(s.size for s in self._mark.statistics("filename"))
        diffs = now.compare_to(self._mark, "traceback")
        diffs.sort(key=lambda d: d.size_diff, reverse=True)
        out["top"] = [_stat(d.traceback, d.size, d.size_diff, d.count_diff) for d in diffs[:top]]
        grown = {k: types[k] - self._mark_types.get(k, 0) for k in types}
        out["objects_grown"] = dict(Counter(grown).most_common(top))
        return out


def _stat(tb: tracemalloc.Traceback, size: int, size_diff: int, count_diff: int) -> dict:
    return {
        "size_bytes": size,
        "size_diff_bytes": size_diff,
        "count_diff": count_diff,
        "at": [f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}" for f in tb],
    }
