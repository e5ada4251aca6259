"""The request flow: parse, route, dispatch (with one retry before the first byte), stream
or aggregate the pod's reply, account in-flight state, metrics and the training sample.

The pod is always asked for a stream with the usage chunk, so TTFT and TPOT are measured for
every request: TTFT = first chunk carrying a token; TPOT = (e2e - ttft) / (token chunks - 1),
both from the moment the successful attempt was sent.

A client disconnect, from the request's arrival on, ends the request wherever it is and is
counted by stage (services/gateway/lifecycle.py).

Served as a plain ASGI handler (services/gateway/asgi.py): events that arrive from the pod
together are accounted one by one and forwarded to the client in one write. On uvicorn that
happens in the pod connection's own callback (UpstreamStream.pump + asgi.ChunkWriter: no
task wake-up, ASGI message or coroutine per event), with the client's flow control pausing
the pod connection; elsewhere the stream is read and sent message by message.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import orjson
from opentelemetry.trace import Span
from starlette.types import Receive, Scope, Send

from services.gateway import explain, tracing
from services.gateway.access import Caller
from services.gateway.asgi import (
    ChunkWriter,
    ClientDisconnected,
    request_headers,
    send_bytes,
    start_event_stream,
)
from services.gateway.errors import GatewayError, send_error, sse_error_event
from services.gateway.gateway import Gateway, RoutedPod, RoutingDecision
from services.gateway.lifecycle import (
    FIRST_TOKEN,
    GENERATING,
    ROUTING,
    STREAMING,
    RequestLife,
)
from services.gateway.openai_request import Kind, ParsedRequest
from services.gateway.scheduling import routing
from services.gateway.stream_accumulator import StreamAccumulator
from services.gateway.upstream import (
    Event,
    PodFailure,
    PodRejected,
    PodReply,
    StreamBroken,
    UpstreamStream,
    fetch_reply,
    open_stream,
)
from shared.schemas import TrainingSample

log = logging.getLogger(__name__)

ENDPOINTS: dict[str, Kind] = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
}
_DONE = b"data: [DONE]\n\n"


async def handle(gw: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI handler of ``POST /v1/completions``, ``/v1/chat/completions`` and
    ``/v1/embeddings``."""
    life = RequestLife(gw.metrics.client_disconnects, uuid.uuid4().hex, scope["path"])
    if gw.draining:  # SIGTERM: refused until the listener closes (services/gateway/server.py)
        gw.metrics.requests.labels(life.endpoint, "503").inc()
        await send_error(send, gw.draining_error(), {"x-request-id": life.request_id})
        return
    try:
        await _handle(gw, life, scope, receive, send)
    except asyncio.CancelledError:
        if not life.cancelled_by_client():
            raise
    finally:
        life.finish()
    if life.gone:
        gw.metrics.failed.labels("client_disconnect").inc()
        gw.metrics.requests.labels(life.endpoint, "499").inc()


async def _handle(
    gw: Gateway, life: RequestLife, scope: Scope, receive: Receive, send: Send
) -> None:
    headers = request_headers(scope)
    try:
        caller = gw.front.caller(headers)  # 401, and 400/403 for the scheduling headers

        def body_read() -> None:  # from now on a disconnect is watched for
            life.stage = ROUTING
            life.watch(send, receive)

        try:
            parsed = await gw.read_request(receive, headers, ENDPOINTS[life.endpoint], body_read)
        except ClientDisconnected:
            life.body_interrupted()
            return
        await caller.admit(parsed)  # 404 for a model the key may not use, 429
        decision = await gw.route(parsed, caller.objectives, life)
    except GatewayError as e:
        life.finish()
        if e.limit is not None:
            gw.metrics.limit_rejections.labels(e.limit).inc()
        gw.metrics.requests.labels(life.endpoint, str(e.status)).inc()
        await send_error(send, e, {"x-request-id": life.request_id})
        return
    await _dispatch(gw, parsed, decision, life, send, caller)


def _routing_headers(
    request_id: str, routed: RoutedPod, decision: RoutingDecision, debug: bool, traced: bool
) -> dict[str, str]:
    """The decision explanation (services/gateway/explain.py)."""
    h = explain.decision_headers(
        request_id,
        routed.candidate.name,
        path=decision.path,
        profile=decision.profile,
        reason=decision.reason,
        model_version=decision.model_version,
        prediction=routed.prediction,
        trace_id=tracing.trace_id_hex() if traced else None,
    )
    if debug:
        h.update(explain.debug_headers(decision.ranked, decision.notes))
    return h


async def _dispatch(
    gw: Gateway,
    parsed: ParsedRequest,
    decision: RoutingDecision,
    life: RequestLife,
    send: Send,
    caller: Caller,
) -> None:
    s = gw.settings
    request_id, endpoint = life.request_id, life.endpoint
    attempts = decision.ranked[: 2 if s.retry_before_first_byte else 1]
    body = parsed.upstream_body()
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "x-request-id": request_id,
    }
    if caller.pod_authorization is not None:  # shared/pod_credentials.py
        headers["authorization"] = caller.pod_authorization
    debug = caller.debug
    assert gw.pod_client is not None, "gateway not started"
    failure: PodFailure | None = None
    traced = gw.tel.enabled
    life.stage = FIRST_TOKEN
    for n, routed in enumerate(attempts):
        pod = routed.candidate
        added = routing.on_dispatch(
            gw.view, gw.index, request_id, decision.prepared, routed.index, gw.clock()
        )
        url = pod.url.rstrip("/") + endpoint
        span = None
        attempt_headers = headers
        if traced:  # the attempt's CLIENT span; its context goes to the pod
            attempt_headers = dict(headers)
            span = tracing.start_pod_call(
                gw.tel, url=url, pod=pod.name, model=parsed.model, request_id=request_id,
                attempt=n, headers=attempt_headers,
            )  # fmt: skip
        t0 = time.perf_counter()
        stream = reply = None
        try:
            if parsed.generates:
                stream, first = await open_stream(
                    gw.pod_client, pod.url, endpoint, body, attempt_headers
                )
            else:  # embeddings: one JSON reply, after the prefill
                reply = await fetch_reply(gw.pod_client, pod.url, endpoint, body, attempt_headers)
        except PodFailure as e:
            tracing.end_pod_call(span, error=e.reason)
            routing.on_refused(
                gw.view, gw.index, request_id, decision.prepared, routed.index, added
            )
            gw.pod_failed(pod.name, e.reason)
            log.warning("pod %s failed before the first byte: %s", pod.name, e,
                        extra={"request_id": request_id, "pod": pod.name})  # fmt: skip
            if n + 1 < len(attempts):
                gw.metrics.retries.labels(e.reason).inc()
            failure = e
            continue
        except PodRejected as e:
            tracing.end_pod_call(span, status=e.status)
            routing.on_refused(
                gw.view, gw.index, request_id, decision.prepared, routed.index, added
            )
            life.finish()
            gw.metrics.failed.labels("pod_rejected").inc()
            gw.metrics.requests.labels(endpoint, str(e.status)).inc()
            await send_bytes(send, e.status, e.body, e.content_type,
                             _routing_headers(request_id, routed, decision, debug, traced))  # fmt: skip
            return
        except BaseException:
            tracing.end_pod_call(span, error="cancelled")
            gw.view.on_finish(request_id)  # the pod got the prompt: its blocks stay recorded
            raise
        gw.outliers.succeeded(pod.name)
        life.stage = STREAMING if parsed.stream else GENERATING
        ex = _Exchange(gw, parsed, decision, routed, life, stream, t0, span, caller)
        headers_out = _routing_headers(request_id, routed, decision, debug, traced)
        try:
            if stream is None:
                assert reply is not None
                await ex.reply(send, reply, headers_out)
                return
            if parsed.stream:
                await ex.stream_to(send, first, headers_out)
            else:
                await ex.aggregate(send, first, headers_out)
        except BaseException:
            cut = not ex.settled and not life.gone and gw.draining  # the drain deadline
            ex.abandon()  # the client left, or the response was torn down (shutdown)
            if stream is not None:
                stream.close()  # also after [DONE]: the rest of the response was not read
            if cut:
                await ex.tell_cut(send, headers_out)
            raise
        ex.abandon()  # a no-op once settled
        await stream.release()  # after [DONE]: keep the pod connection for the next request
        return

    life.finish()
    gw.metrics.failed.labels("pod_unavailable").inc()
    gw.metrics.requests.labels(endpoint, "502").inc()
    msg = f"no pod could serve the request: {failure}" if failure else "no pod could serve it"
    err = GatewayError(502, msg, type="upstream_error", code="pod_unavailable")
    await send_error(send, err, {"x-request-id": request_id})


class _Exchange:
    """One dispatched request: event accounting, then exactly one of succeed/fail."""

    def __init__(
        self,
        gw: Gateway,
        parsed: ParsedRequest,
        decision: RoutingDecision,
        routed: RoutedPod,
        life: RequestLife,
        stream: UpstreamStream | None,
        t0: float,
        span: Span | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.gw, self.parsed, self.decision, self.routed = gw, parsed, decision, routed
        self.life, self.stream, self.t0 = life, stream, t0
        self.request_id, self.endpoint = life.request_id, life.endpoint
        self.span = span  # the pod call's CLIENT span (tracing on), ended on settlement
        # stream: the pod's SSE stream (generation); None for a whole reply (embeddings)
        self.caller = caller  # charged its output tokens on settlement
        self.acc = StreamAccumulator(parsed.kind)
        self.settled = False
        self.started = False  # a streaming response's head has gone out
        gw.metrics.in_flight.inc()

    def on_event(self, raw: bytes, chunk: dict[str, Any], now: float) -> bytes | None:
        """Account a chunk; returns the SSE bytes to forward to a streaming client (or None)."""
        if self.acc.feed(chunk, now) and self.acc.token_chunks == 1:
            gw = self.gw
            gw.view.on_first_token(self.request_id, gw.clock())
            gw.metrics.observe_client_ttft(self.parsed.model, now - self.life.arrived)
        if not self.parsed.stream:
            return None
        if "usage" in chunk and not self.parsed.include_usage:
            if not chunk.get("choices"):
                return None  # the usage-only chunk the client did not ask for
            chunk = {k: v for k, v in chunk.items() if k != "usage"}
            raw = orjson.dumps(chunk)
        return b"data: " + raw + b"\n\n"

    def on_events(self, events: list[Event]) -> bytes:
        """Account events that arrived together; the SSE bytes to forward, joined."""
        now = time.perf_counter()
        if len(events) == 1:  # the usual arrival: one event
            raw, chunk = events[0]
            return self.on_event(raw, chunk, now) or b""
        out = [b for raw, chunk in events if (b := self.on_event(raw, chunk, now))]
        return b"".join(out)

    async def stream_to(self, send: Send, first: list[Event], headers: dict[str, str]) -> None:
        """Forward the stream to an SSE client (a client disconnect cancels it: the request's
        RequestLife)."""
        stream = self.stream
        out = self.on_events(first)
        try:
            if stream.done:  # the whole reply came at once: headers, then it all, below
                await start_event_stream(send, headers)
                self.started = True
            else:  # the head and the first events in one write
                writer = await start_event_stream(send, headers, out)
                self.started = True
                out = b""
                if writer is not None:  # uvicorn: forwarded from the pod's callbacks
                    out = await self._push(writer)
            while not stream.done:  # any other ASGI server
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                out = self.on_events(await stream.next_events())
            self.succeed()
            await send({"type": "http.response.body", "body": out + _DONE, "more_body": False})
        except StreamBroken as e:
            self.fail(e.reason, e)
            err = sse_error_event(f"the pod failed mid-stream: {e}", code="pod_stream_failed")
            await send({"type": "http.response.body", "body": err, "more_body": False})

    async def _push(self, writer: ChunkWriter) -> bytes:
        """The rest of the stream, forwarded from the pod connection's callbacks; returns the
        bytes of the events that came with ``[DONE]`` (they go out with the response's end).
        While the client's socket buffer is full the pod connection is paused."""
        stream = self.stream
        tail = b""
        drain: asyncio.Task | None = None

        async def resume() -> None:
            nonlocal drain
            await writer.drain()
            drain = None
            stream.resume_reading()

        def deliver(events: list[Event], final: bool) -> None:
            nonlocal tail, drain
            data = self.on_events(events)
            if final:
                tail = data
                return
            writer.write(data)
            if drain is None and writer.paused:
                stream.pause_reading()
                drain = asyncio.ensure_future(resume())

        try:
            await stream.pump(deliver)
        finally:
            if drain is not None:  # ended while paused: read again before the pool gets it
                drain.cancel()
                stream.resume_reading()
        return tail

    async def aggregate(self, send: Send, first: list[Event], headers: dict[str, str]) -> None:
        self.on_events(first)
        try:
            if not self.stream.done:  # accounted in the pod connection's callbacks
                await self.stream.pump(lambda events, final: self.on_events(events))
        except StreamBroken as e:
            self.fail(e.reason, e, status="502")
            err = GatewayError(502, f"the pod failed mid-response: {e}", type="upstream_error",
                               code="pod_stream_failed")  # fmt: skip
            await send_error(send, err, headers)
            return
        self.succeed()
        reply = self.acc.completion(self.request_id, self.parsed.model, int(self.gw.clock()))
        await send_bytes(send, 200, orjson.dumps(reply), headers=headers)

    async def reply(self, send: Send, reply: PodReply, headers: dict[str, str]) -> None:
        """A whole reply (embeddings: prefill only): it arrived when the prefill ended, which
        is its time to first token; no TPOT, no output tokens."""
        acc = self.acc
        acc.first_token_at = acc.last_at = time.perf_counter()
        self.gw.view.on_first_token(self.request_id, self.gw.clock())
        self.gw.metrics.observe_client_ttft(
            self.parsed.model, acc.first_token_at - self.life.arrived
        )
        self.succeed()
        await send_bytes(send, reply.status, reply.body, reply.content_type, headers)

    async def tell_cut(self, send: Send, headers: dict[str, str]) -> None:
        """The drain deadline cut the request: say so to the client (an SSE error event, or
        a 503 before a non-streaming response), best effort."""
        msg = "the gateway is shutting down: the request was cut at its drain deadline"
        try:
            if self.parsed.stream and self.started:
                err = sse_error_event(msg, "service_unavailable", code="shutdown")
                await send({"type": "http.response.body", "body": err, "more_body": False})
            elif not self.parsed.stream:
                e = GatewayError(503, msg, type="service_unavailable", code="shutdown")
                await send_error(send, e, headers)
        except Exception as e:  # the connection is going away anyway
            log.debug("could not tell the client of the cut: %s", e)

    # --- settlement -----------------------------------------------------------------------
    def _settle(self) -> bool:
        if self.settled:
            return False
        self.settled = True
        self.life.finish()  # the outcome is decided: a disconnect now changes nothing
        if self.stream is not None and not self.stream.done:
            self.stream.close()  # failed or abandoned: drop the pod connection
        self.gw.view.on_finish(self.request_id, self.gw.clock(), self.acc.output_tokens())
        self.gw.metrics.in_flight.dec()
        if self.caller is not None:
            self.caller.settled(self.acc.output_tokens())
        return True

    def fail(self, reason: str, err: Exception, status: str = "200") -> None:
        if not self._settle():
            return
        tracing.end_pod_call(self.span, status=200, error=f"mid_stream_{reason}")
        self.gw.pod_failed(self.routed.candidate.name, f"mid_stream_{reason}")
        log.warning("pod %s failed mid-stream (%s): %s", self.routed.candidate.name, reason, err,
                    extra={"request_id": self.request_id})  # fmt: skip
        self.gw.metrics.failed.labels(f"mid_stream_{reason}").inc()
        self.gw.metrics.requests.labels(self.endpoint, status).inc()

    def abandon(self) -> None:
        """The client went away (counted by the handler) or the response was torn down
        (cancelled: at the drain deadline, ``shutdown``) before the end."""
        if not self._settle():
            return
        gone = self.life.gone
        why = "client_disconnect" if gone else "shutdown" if self.gw.draining else "cancelled"
        tracing.end_pod_call(self.span, status=200, error=why)
        if not gone:
            log.warning("request %s to pod %s cut before its end (%s)", self.request_id,
                        self.routed.candidate.name, why)  # fmt: skip
            self.gw.metrics.failed.labels(why).inc()
            self.gw.metrics.requests.labels(self.endpoint, "503").inc()

    def succeed(self) -> None:
        if not self._settle():
            return
        gw, acc, routed, decision = self.gw, self.acc, self.routed, self.decision
        gw.metrics.requests.labels(self.endpoint, "200").inc()
        end = acc.last_at if acc.last_at is not None else time.perf_counter()
        e2e_ms = (end - self.t0) * 1000
        ttft_ms = tpot_ms = None
        model = self.parsed.model
        if acc.first_token_at is not None:
            ttft_ms = (acc.first_token_at - self.t0) * 1000
            gw.metrics.ttft.labels(model).observe(ttft_ms / 1000)
            client_ttft_ms = (acc.first_token_at - self.life.arrived) * 1000
            if decision.slo_ttft_ms is not None and client_ttft_ms > decision.slo_ttft_ms:
                gw.metrics.ttft_slo_violations.labels(model).inc()
                gw.metrics.slo_violations.labels(model, "ttft").inc()
            chunks = acc.choice_chunks
            if chunks >= 2:
                tpot_ms = (e2e_ms - ttft_ms) / (chunks - 1)
                gw.metrics.tpot.labels(model).observe(tpot_ms / 1000)
                if decision.slo_tpot_ms is not None and tpot_ms > decision.slo_tpot_ms:
                    gw.metrics.slo_violations.labels(model, "tpot").inc()
        pred = routed.prediction
        if pred is not None:
            gw.metrics.predicted_ttft.labels(model).observe(pred.ttft_ms / 1000)
            gw.metrics.predicted_tpot.labels(model).observe(pred.tpot_ms / 1000)
        sample = TrainingSample(
            request_id=self.request_id,
            pool=gw.settings.pool,
            pod=routed.candidate.name,
            model=model,
            features=list(routed.row),
            e2e_ms=e2e_ms,
            input_tokens=decision.input_tokens,
            output_tokens=acc.output_tokens(),
            streaming=self.parsed.stream,
            ts=gw.clock(),
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            routing=decision.path,
            model_version=decision.model_version,
            predicted_ttft_ms=pred.ttft_ms if pred else None,
            predicted_tpot_ms=pred.tpot_ms if pred else None,
        )
        if self.span is not None:
            tracing.end_pod_call(
                self.span,
                status=200,
                attributes={
                    "gen_ai.usage.input_tokens": decision.input_tokens,
                    "gen_ai.usage.output_tokens": sample.output_tokens,
                    "headroom.ttft_ms": ttft_ms,
                    "headroom.tpot_ms": tpot_ms,
                    "headroom.e2e_ms": e2e_ms,
                },
            )
        for target in gw.drift.observe_sample(sample):
            gw.metrics.prediction_mape.labels(target=target).set(gw.drift.mape(target))
        if gw.samples is not None:
            gw.samples.publish(sample)
