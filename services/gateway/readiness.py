"""Whether a gateway replica should receive traffic (``GET /readyz``). Pure.

Liveness (``GET /livez``) is only "the process serves HTTP": restarting a gateway never
fixes NATS or the pods, so nothing else fails it. Readiness:

- ``starting``: the lifespan has not finished starting (NATS connected, stream ensured);
- ``draining``: SIGTERM arrived (services/gateway/server.py): not ready, for good;
- ``ok``: NATS is connected;
- ``nats_outage``: still ready: NATS has been down for at most ``grace_s`` and the pod view
  holds at least one ready pod record. The gateway routes on that last view and on its own
  in-flight counts (a record older than ``stale_after_s`` is replaced by them), and with no
  predictor reachable the profile falls back to its heuristic path at once
  (``nats_disconnected`` fallback reason). Every replica shares one NATS, so readiness that
  followed NATS would pull all of them out of a Service together on one blip;
- ``nats_disconnected``: not ready: NATS down for longer than ``grace_s``, or with no ready
  pod record to route on.

``GET /health`` keeps its old meaning for existing users: 200 while NATS is connected,
503 otherwise (a dependency check, not a probe).
"""

from __future__ import annotations

from dataclasses import dataclass

STARTING, DRAINING, OK, NATS_OUTAGE, NATS_DISCONNECTED = (
    "starting", "draining", "ok", "nats_outage", "nats_disconnected",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    status: str


def readiness(
    *,
    started: bool,
    draining: bool,
    nats_connected: bool,
    nats_down_s: float,
    ready_pods: int,
    grace_s: float,
) -> Readiness:
    """The verdict; ``nats_down_s``: how long NATS has been disconnected (0 if it is not)."""
    if draining:
        return Readiness(False, DRAINING)
    if not started:
        return Readiness(False, STARTING)
    if nats_connected:
        return Readiness(True, OK)
    if nats_down_s <= grace_s and ready_pods > 0:
        return Readiness(True, NATS_OUTAGE)
    return Readiness(False, NATS_DISCONNECTED)
