"""When the dev launcher restarts a service that exited (pure: time is passed in).

A service that exits is restarted after a backoff: ``initial_s`` after its first exit,
doubling with every exit that follows a short run (less than ``stable_s`` up), capped at
``max_s``; a run of at least ``stable_s`` resets it. A service that keeps crashing at start
is thus retried every ``max_s`` instead of in a tight loop, and one that crashes once after
running for a while comes back at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    initial_s: float = 0.5
    max_s: float = 10.0
    stable_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s or self.stable_s <= 0:
            raise ValueError("restart policy: 0 < initial_s <= max_s and stable_s > 0")


class RestartState:
    """One service's restart bookkeeping."""

    __slots__ = ("_backoff", "exited_at", "policy", "restart_at", "restarts", "started_at")

    def __init__(self, policy: RestartPolicy, started_at: float) -> None:
        self.policy = policy
        self.started_at = started_at
        self.restarts = 0
        self.exited_at: float | None = None
        self.restart_at: float | None = None  # set while an exit waits for its restart
        self._backoff = 0.0

    def exited(self, now: float) -> float:
        """The service was seen exited at ``now``: returns the delay before its restart."""
        p = self.policy
        if now - self.started_at >= p.stable_s or self._backoff == 0.0:
            self._backoff = p.initial_s
        else:
            self._backoff = min(self._backoff * 2, p.max_s)
        self.exited_at = now
        self.restart_at = now + self._backoff
        return self._backoff

    def due(self, now: float) -> bool:
        return self.restart_at is not None and now >= self.restart_at

    def restarted(self, now: float) -> None:
        self.restarts += 1
        self.started_at = now
        self.restart_at = None
