"""Fault injection for failure tests: make the next N generation requests fail.

Set with ``POST /sim/fault`` and a JSON body ``{"mode": "error"|"drop"|"off", "count": 1,
"status": 500, "after_tokens": 2}``:

- ``error``: the next ``count`` generation requests get an HTTP ``status`` response with an
  OpenAI error body before any token;
- ``drop``: the next ``count`` generation requests have their TCP connection aborted after
  ``after_tokens`` tokens (streaming) or before the response (non-streaming);
- ``off``: clears the fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.simulator.openai_api import ApiError

MODES = ("error", "drop", "off")


@dataclass(frozen=True, slots=True)
class Fault:
    mode: str  # "error" or "drop"
    status: int
    after_tokens: int


class FaultState:
    def __init__(self) -> None:
        self.mode = "off"
        self.remaining = 0
        self.status = 500
        self.after_tokens = 2

    def configure(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "fault body must be a JSON object")
        unknown = set(body) - {"mode", "count", "status", "after_tokens"}
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
        if mode == "off":
            self.mode, self.remaining = "off", 0
            return
        self.mode, self.remaining = mode, count
        self.status, self.after_tokens = status, after_tokens

    def take(self) -> Fault | None:
        """The fault for the next generation request, if any (consumes one count)."""
        if self.mode == "off" or self.remaining <= 0:
            return None
        self.remaining -= 1
        fault = Fault(self.mode, self.status, self.after_tokens)
        if self.remaining == 0:
            self.mode = "off"
        return fault

    def state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "count": self.remaining,
            "status": self.status,
            "after_tokens": self.after_tokens,
        }


def _int(body: dict, key: str, default: int, minimum: int) -> int:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ApiError(400, f"'{key}' must be an integer >= {minimum}", key)
    return v
