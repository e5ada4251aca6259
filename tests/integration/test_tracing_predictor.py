"""The predictor continues the caller's trace from the NATS headers (real NATS and Redis):
a SERVER span per request, links to every coalesced caller, an inference span per batch."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.gateway.coalescer import CoalescerConfig
from services.gateway.predictor_client import PredictorClient
from services.predictor.service import PredictorService
from shared import trace_context
from shared.bus import connect_nats
from shared.schemas import PREDICT_OK, PredictReply, PredictRequest
from shared.telemetry import Telemetry, setup_telemetry
from tests.integration.test_tracing_gateway import _publish_model
from tests.integration.trainer_harness import predictor_settings
from tests.unit.trainer_synth import synthetic_window

ROWS = synthetic_window(4, seed=3).rows().tolist()


def _tel(exporter: InMemorySpanExporter, service: str) -> Telemetry:
    return setup_telemetry(service, env={}, span_exporter=exporter, simple_processor=True)


async def test_server_span_continues_the_callers_and_links_coalesced_ones(isolated):
    names = isolated["names"]
    exporter = InMemorySpanExporter()
    caller = _tel(exporter, "gateway")
    version = await _publish_model(isolated)
    svc = PredictorService(predictor_settings(isolated, "r-a"), telemetry=_tel(exporter, "pred"))
    await svc.start()
    nc = await connect_nats(isolated["nats_url"], "test")
    try:
        assert svc.slot.version == version
        callers = []
        for i in range(3):
            with caller.span(f"decision-{i}", kind=SpanKind.CLIENT) as span:
                callers.append(span.get_span_context())
        # one request on behalf of three callers (the gateway's coalescer does this)
        headers = trace_context.inject({}, None)
        headers[trace_context.TRACEPARENT] = trace_context.traceparent(callers[0])
        headers[trace_context.LINKS_HEADER] = trace_context.encode_links(callers)
        data = PredictRequest(rows=ROWS).encode()
        replies = await asyncio.gather(
            nc.request(names.predict, data, timeout=5.0, headers=headers),
            nc.request(names.predict, data, timeout=5.0),  # untraced caller
            nc.request(names.predict, b"garbage", timeout=5.0, headers=headers),
        )
        assert PredictReply.decode(replies[0].data).status == PREDICT_OK
        assert PredictReply.decode(replies[1].data).status == PREDICT_OK
    finally:
        await nc.close()
        await svc.stop()

    spans = list(exporter.get_finished_spans())
    servers = [s for s in spans if s.kind == SpanKind.SERVER]
    assert len(servers) == 3
    traced_ok = [
        s for s in servers if s.parent is not None and s.attributes.get("headroom.model.version")
    ]
    (ok,) = traced_ok
    assert ok.name == f"process {names.predict}"
    assert ok.parent.span_id == callers[0].span_id and ok.context.trace_id == callers[0].trace_id
    assert [(lk.context.trace_id, lk.context.span_id) for lk in ok.links] == [
        (c.trace_id, c.span_id) for c in callers
    ]
    assert ok.attributes["headroom.predict.callers"] == 3
    assert ok.attributes["messaging.system"] == "nats"
    assert ok.attributes["headroom.model.version"] == version
    (bad,) = [s for s in servers if s.attributes.get("error.type") == "bad_request"]
    assert bad.status.is_ok is False
    untraced = [s for s in servers if s.parent is None]
    assert len(untraced) == 1  # a request without context starts its own trace
    inference = [s for s in spans if s.name == "predictor.inference"]
    assert inference and all(s.attributes["headroom.model.version"] == version for s in inference)
    served_by = {s.context.span_id for s in servers}
    for s in inference:
        assert s.parent.span_id in served_by
        assert all(lk.context.span_id in served_by for lk in s.links)


async def test_tracing_off_sends_no_spans_and_answers_the_same(isolated):
    names = isolated["names"]
    await _publish_model(isolated)
    svc = PredictorService(predictor_settings(isolated, "r-b"))
    await svc.start()
    nc = await connect_nats(isolated["nats_url"], "test")
    try:
        reply = await nc.request(names.predict, PredictRequest(rows=ROWS).encode(), timeout=5.0)
        assert PredictReply.decode(reply.data).status == PREDICT_OK
        assert svc._tracing is None and not svc._spans
    finally:
        await nc.close()
        await svc.stop()


async def test_coalesced_calls_reach_the_predictor_as_links(isolated):
    """Six concurrent routing decisions: the first goes alone, the five queued behind it go
    as one request whose SERVER span links all five callers' CLIENT spans."""
    names = isolated["names"]
    exporter = InMemorySpanExporter()
    gw_tel = _tel(exporter, "gateway")
    await _publish_model(isolated)
    svc = PredictorService(predictor_settings(isolated, "r-c"), telemetry=_tel(exporter, "pred"))
    await svc.start()
    nc = await connect_nats(isolated["nats_url"], "test")
    try:
        client = PredictorClient(
            nc, names.predict, 5.0, coalescer=CoalescerConfig(window_s=0.5), telemetry=gw_tel
        )
        outcomes = await asyncio.gather(*(client.predict(ROWS) for _ in range(6)))
        assert all(o.predictions is not None for o in outcomes)
        assert client.coalescer.stats.batches == 2
    finally:
        await nc.close()
        await svc.stop()

    spans = exporter.get_finished_spans()
    callers = {
        s.context.span_id: s.context.trace_id
        for s in spans
        if s.kind == SpanKind.CLIENT and s.name == f"send {names.predict}"
    }
    assert len(callers) == 6 and len(set(callers.values())) == 6  # six separate traces
    servers = sorted((s for s in spans if s.kind == SpanKind.SERVER), key=lambda s: len(s.links))
    alone, batch = servers
    assert not alone.links and alone.parent.span_id in callers
    assert batch.parent.span_id in callers and batch.attributes["headroom.predict.callers"] == 5
    linked = {lk.context.span_id for lk in batch.links}
    assert len(linked) == 5 and linked <= set(callers) and alone.parent.span_id not in linked
    for lk in batch.links:
        assert callers[lk.context.span_id] == lk.context.trace_id
