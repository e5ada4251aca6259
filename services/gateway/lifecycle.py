"""A proxied request's life as its client sees it: when it arrived, the stage it is in, and
whether the client is still there.

From the moment the request arrives until its response is complete, a client disconnect
is noticed (services/gateway/asgi.py: while the body is read, by ``receive()``; after it,
by :func:`asgi.on_disconnect`, which on uvicorn costs no task) and ends the request at
once: the handler's task is cancelled wherever it waits (the flow-control queue lets go of
it, an in-flight pod request is dropped, which closes the pod connection so the pod aborts
the request, and the pod view's in-flight accounting is released), and the disconnect is
counted by stage in ``headroom_gateway_client_disconnects_total{stage}``:

    body         the request body was being read
    routing      tokenizing, predicting, scheduling
    queued       waiting in the profile's flow-control queue
    first_token  dispatched to a pod, waiting for its first event
    streaming    a streaming response was being forwarded
    generating   a non-streaming response was being generated (the gateway aggregates it)

The cancellation is the client's alone: :meth:`RequestLife.cancelled_by_client` tells the
handler to swallow it (any other cancellation, a shutdown's, goes on).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import Counter
from starlette.types import Receive, Send

from services.gateway import asgi

BODY, ROUTING, QUEUED, FIRST_TOKEN, STREAMING, GENERATING = (
    "body", "routing", "queued", "first_token", "streaming", "generating",
)  # fmt: skip
STAGES = (BODY, ROUTING, QUEUED, FIRST_TOKEN, STREAMING, GENERATING)


class RequestLife:
    """One request: its id, endpoint, arrival time (``arrived``, perf_counter seconds),
    stage and client. ``done`` once the response is being completed (a disconnect then
    changes nothing)."""

    __slots__ = (
        "_stop", "_task", "arrived", "disconnects", "done", "endpoint", "gone", "request_id",
        "stage",
    )  # fmt: skip

    def __init__(
        self, disconnects: Counter, request_id: str, endpoint: str, arrived: float | None = None
    ) -> None:
        self.arrived = time.perf_counter() if arrived is None else arrived
        self.request_id = request_id
        self.endpoint = endpoint
        self.disconnects = disconnects  # counter labelled by stage
        self.stage = BODY
        self.gone = False  # the client disconnected before the response was complete
        self.done = False
        self._task: asyncio.Task | None = None
        self._stop: Callable[[], None] | None = None

    def watch(self, send: Send, receive: Receive) -> None:
        """Watch for a disconnect from now on (call once the body has been read)."""
        self._task = asyncio.current_task()
        self._stop = asgi.on_disconnect(send, receive, self._client_left)

    def body_interrupted(self) -> None:
        """The client went away while the body was read (asgi.ClientDisconnected)."""
        self.gone = True
        self.disconnects.labels(BODY).inc()

    def _client_left(self) -> None:
        if self.done or self.gone:
            return
        self.gone = True
        self.disconnects.labels(self.stage).inc()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def finish(self) -> None:
        """The response is being completed: stop watching."""
        self.done = True
        if self._stop is not None:
            self._stop()
            self._stop = None

    def cancelled_by_client(self) -> bool:
        """Called with a CancelledError in hand: True (and the cancellation is taken back)
        when it is this request's client that left and nothing else cancelled the task."""
        task = self._task
        if not self.gone or task is None:
            return False
        return task.uncancel() == 0
