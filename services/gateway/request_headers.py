"""Per-request scheduling headers: SLOs, priority, profile.

- ``x-llm-d-slo-ttft-ms`` (alias ``x-slo-ttft-ms``): TTFT SLO in milliseconds,
- ``x-llm-d-slo-tpot-ms`` (alias ``x-slo-tpot-ms``): TPOT SLO in milliseconds,
- ``x-headroom-priority``: integer priority overriding the model objective's (< 0 =
  sheddable),
- ``x-headroom-profile``: scheduling profile for this request (experiments).

When both a header and its alias are present the ``x-llm-d-`` one wins. An SLO must be a
positive finite number no larger than :data:`MAX_SLO_MS`; anything else is a 400 naming the
header.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from services.gateway.errors import bad_request
from services.gateway.scheduling.config import PRIORITY_MAX, PRIORITY_MIN

TTFT_HEADERS = ("x-llm-d-slo-ttft-ms", "x-slo-ttft-ms")
TPOT_HEADERS = ("x-llm-d-slo-tpot-ms", "x-slo-tpot-ms")
PRIORITY_HEADER = "x-headroom-priority"
PROFILE_HEADER = "x-headroom-profile"
MAX_SLO_MS = 3_600_000.0  # one hour: anything larger is a mistake, not an objective


@dataclass(frozen=True, slots=True)
class RequestObjectives:
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int | None = None  # None: the model objective's priority
    profile: str | None = None  # None: the gateway's active profile


def _slo(headers: Mapping[str, str], names: tuple[str, ...]) -> float | None:
    for name in names:
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            val = float(raw.strip())
        except ValueError:
            val = math.nan
        if not math.isfinite(val) or val <= 0 or val > MAX_SLO_MS:
            raise bad_request(
                f"header '{name}' must be a positive number of milliseconds no larger than "
                f"{MAX_SLO_MS:.0f}, got {raw!r}",
                param=name,
                code="invalid_header",
            )
        return val
    return None


def parse_objective_headers(
    headers: Mapping[str, str], profiles: Collection[str], allow_profile: bool = True
) -> RequestObjectives:
    """Raises GatewayError(400) naming the offending header. ``headers`` must look up names
    case-insensitively (Starlette's Headers do)."""
    ttft = _slo(headers, TTFT_HEADERS)
    tpot = _slo(headers, TPOT_HEADERS)
    priority = None
    raw = headers.get(PRIORITY_HEADER)
    if raw is not None:
        try:
            priority = int(raw.strip())
        except ValueError:
            priority = None
        if priority is None or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
            raise bad_request(
                f"header '{PRIORITY_HEADER}' must be an integer in {PRIORITY_MIN}..{PRIORITY_MAX}"
                f", got {raw!r}",
                param=PRIORITY_HEADER,
                code="invalid_header",
            )
    profile = None
    raw = headers.get(PROFILE_HEADER)
    if raw is not None and allow_profile:
        profile = raw.strip()
        if profile not in profiles:
            raise bad_request(
                f"header '{PROFILE_HEADER}' names no scheduling profile, got {raw!r} "
                f"(known: {', '.join(sorted(profiles))})",
                param=PROFILE_HEADER,
                code="invalid_header",
            )
    return RequestObjectives(ttft, tpot, priority, profile)
