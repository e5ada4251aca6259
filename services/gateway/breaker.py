"""Circuit breaker of the predictor client (pure: time is passed in, no I/O).

While the predictors are known to be down (frozen, or the bus unreachable) a routing
decision should not wait out the prediction deadline only to fall back: after
``failures`` consecutive failed calls (the client counts timeouts and errors) the breaker *opens*
and calls are skipped (the request is routed at once without predictions, reason
``circuit_open``). After ``open_s`` it is *half open*: the next call is allowed as a probe
(the client sends it in the background, so no request waits for it) while every other
call is still skipped. A probe that succeeds closes the breaker; one that fails opens it
again for twice as long, up to ``max_open_s``. Any successful reply closes it, also one to
a call sent before it opened. ``no_model`` is a success here: the predictor answered.

States and events:

    closed --failures consecutive failures--> open --open_s passed--> half_open
    half_open --probe ok--> closed          half_open --probe failed--> open (2x, capped)
    open/half_open --any ok--> closed       half_open --no outcome in max_open_s--> new probe
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)

State = Literal["closed", "open", "half_open"]
Verdict = Literal["call", "skip", "probe"]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failures: int = 3  # consecutive failed calls that open the breaker (0: never opens)
    open_s: float = 0.5  # first wait before a probe
    max_open_s: float = 4.0  # longest wait between probes (it doubles after each failure)

    def __post_init__(self) -> None:
        if self.failures < 0 or self.open_s <= 0 or self.max_open_s < self.open_s:
            raise ValueError("breaker: failures >= 0 and 0 < open_s <= max_open_s")


class CircuitBreaker:
    __slots__ = ("_failures", "_open_for", "_reopen_at", "config", "state")

    def __init__(self, config: BreakerConfig | None = None) -> None:
        self.config = config or BreakerConfig()
        self.state: State = CLOSED
        self._failures = 0  # consecutive failures while closed
        self._open_for = self.config.open_s
        self._reopen_at = 0.0  # when open: the time the next probe may go

    @property
    def open_for_s(self) -> float:
        """How long the breaker stays open after the next (or the last) opening."""
        return self._open_for

    def allow(self, now: float) -> Verdict:
        """What to do with a call made at ``now``: send it (``call``), skip it (``skip``),
        or send it as the probe (``probe``; the breaker is half open from now on)."""
        if self.state == CLOSED:
            return "call"
        if now >= self._reopen_at:  # open long enough, or a probe that never came back
            self.state = HALF_OPEN
            self._reopen_at = now + self.config.max_open_s
            return "probe"
        return "skip"

    def record(self, ok: bool, now: float, *, probe: bool = False) -> State | None:
        """The outcome of a call (``probe``: the half-open probe); returns the new state if
        it changed."""
        before = self.state
        if ok:
            self._failures = 0
            self._open_for = self.config.open_s
            self.state = CLOSED
        elif self.state == CLOSED:
            self._failures += 1
            if self.config.failures and self._failures >= self.config.failures:
                self._open(now)
        elif self.state == HALF_OPEN and probe:
            self._open_for = min(self._open_for * 2, self.config.max_open_s)
            self._open(now)
        # a failure while open (a call sent before it opened): already known
        return self.state if self.state != before else None

    def _open(self, now: float) -> None:
        self.state = OPEN
        self._failures = 0
        self._reopen_at = now + self._open_for
