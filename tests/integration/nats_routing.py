"""Wait until NATS routes requests to a subscription that was just made.

A queue subscription can stay invisible to requests from other connections for a few
milliseconds after SUB + PING/PONG: with nats-server 2.9.10 about 1 request in 2,000 sent
right after subscribing got "no responders" (never with a long-lived subscription, nor with
a plain one). Live predictors subscribe once and stay, so only tests that subscribe and then
immediately assert on the first reply need this.
"""

from __future__ import annotations

import asyncio
import time

import nats.errors
from nats.aio.client import Client as NATS

PROBE = b"headroom-test-probe"  # a test responder answers it without recording it


async def until_routed(nc: NATS, subject: str, timeout_s: float = 5.0) -> None:
    """Return once a request on ``subject`` from ``nc`` gets any reply (a predictor answers
    the probe with an error reply, a test responder with an empty one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await nc.request(subject, PROBE, timeout=1.0)
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise AssertionError(f"no responder on {subject} after {timeout_s} s") from None
            await asyncio.sleep(0.005)
