"""The readiness verdict of a gateway replica (GET /readyz): a short NATS outage does not
pull it out of rotation while it has pods to route on; a drain always does."""

from __future__ import annotations

import pytest

from services.gateway.readiness import readiness


@pytest.mark.parametrize(
    ("started", "draining", "connected", "down_s", "pods", "ready", "status"),
    [
        (False, False, True, 0.0, 3, False, "starting"),
        (True, False, True, 0.0, 0, True, "ok"),  # no pod: the gateway answers 503 itself
        (True, False, True, 0.0, 3, True, "ok"),
        (True, False, False, 2.0, 3, True, "nats_outage"),
        (True, False, False, 30.0, 1, True, "nats_outage"),
        (True, False, False, 30.01, 1, False, "nats_disconnected"),  # past the grace
        (True, False, False, 1.0, 0, False, "nats_disconnected"),  # nothing to route on
        (True, True, True, 0.0, 3, False, "draining"),
        (False, True, False, 99.0, 0, False, "draining"),
    ],
)
def test_readiness(started, draining, connected, down_s, pods, ready, status):
    r = readiness(
        started=started, draining=draining, nats_connected=connected, nats_down_s=down_s,
        ready_pods=pods, grace_s=30.0,
    )  # fmt: skip
    assert (r.ready, r.status) == (ready, status)
