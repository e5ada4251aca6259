"""Fault injection for failure tests: make the next N generation requests fail.

Set with ``POST /sim/fault`` and a JSON body ``{"mode": ..., "count": 1, "status": 500,
"after_tokens": 2, "delay_s": 30.0}``:

- ``error``: the next ``count`` generation requests get an HTTP ``status`` response with an
  OpenAI error body before any token;
- ``drop``: the next ``count`` generation requests have their TCP connection aborted after
  ``after_tokens`` tokens (streaming) or before the response (non-streaming);
- ``hang``: the next ``count`` generation requests get no response at all (not even a
  status line) for ``delay_s``, then the connection is dropped: a pod that accepted the
  connection and hangs before the first byte;
- ``malformed``: the next ``count`` streaming requests get a ``data:`` event that is not
  JSON after ``after_tokens`` tokens (0: as their first event), then the connection ends;
- ``slow_metrics``: every ``/metrics`` answer is delayed by ``delay_s`` until ``off``
  (generation is not affected);
- ``off``: clears every fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.simulator.openai_api import ApiError

MODES = ("error", "drop", "hang", "malformed", "slow_metrics", "off")
GENERATION_MODES = ("error", "drop", "hang", "malformed")


@dataclass(frozen=True, slots=True)
class Fault:
    mode: str  # one of GENERATION_MODES
    status: int
    after_tokens: int
    delay_s: float = 0.0


class FaultState:
    def __init__(self) -> None:
        self.mode = "off"
        self.remaining = 0
        self.status = 500
        self.after_tokens = 2
        self.delay_s = 30.0
        self.metrics_delay_s = 0.0  # slow_metrics

    def configure(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "fault body must be a JSON object")
        unknown = set(body) - {"mode", "count", "status", "after_tokens", "delay_s"}
        if unknown:
            raise ApiError(400, f"unknown fault fields: {sorted(unknown)}", sorted(unknown)[0])
        mode = body.get("mode")
        if mode not in MODES:
            raise ApiError(400, f"'mode' must be one of {list(MODES)}", "mode")
        count = _int(body, "count", 1, 0)
        status = _int(body, "status", 500, 100)
        if status > 599:
            raise ApiError(400, "'status' must be an HTTP status code", "status")
        after_tokens = _int(body, "after_tokens", 2, 0)
        delay_s = body.get("delay_s", 30.0)
        if (
            isinstance(delay_s, bool)
            or not isinstance(delay_s, int | float)
            or not (0 <= delay_s <= 3600)
        ):
            raise ApiError(400, "'delay_s' must be a number of seconds in [0, 3600]", "delay_s")
        if mode == "off":
            self.mode, self.remaining, self.metrics_delay_s = "off", 0, 0.0
            return
        if mode == "slow_metrics":
            self.metrics_delay_s = float(delay_s)
            return
        self.mode, self.remaining = mode, count
        self.status, self.after_tokens, self.delay_s = status, after_tokens, float(delay_s)

    def take(self) -> Fault | None:
        """The fault for the next generation request, if any (consumes one count)."""
        if self.mode == "off" or self.remaining <= 0:
            return None
        self.remaining -= 1
        fault = Fault(self.mode, self.status, self.after_tokens, self.delay_s)
        if self.remaining == 0:
            self.mode = "off"
        return fault

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "count": self.remaining,
            "status": self.status,
            "after_tokens": self.after_tokens,
            "delay_s": self.delay_s,
            "metrics_delay_s": self.metrics_delay_s,
        }


def _int(body: dict, key: str, default: int, minimum: int) -> int:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ApiError(400, f"'{key}' must be an integer >= {minimum}", key)
    return v
