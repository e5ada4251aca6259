"""Trainer tracing against real NATS JetStream and Redis: each consumed sample gets a CONSUMER
span parented by the context in its message headers, and the fit span links every sample it
was trained on."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.trainer.service import TrainerService
from shared import trace_context
from shared.bus import connect_nats, ensure_samples_stream
from shared.telemetry import setup_telemetry
from tests.integration.trainer_harness import eventually, make_samples, trainer_settings


async def test_fit_span_links_the_samples_it_trained_on(isolated):
    names = isolated["names"]
    exporter = InMemorySpanExporter()
    gateway_tel = setup_telemetry("gateway", env={}, span_exporter=exporter, simple_processor=True)
    trainer_tel = setup_telemetry("trainer", env={}, span_exporter=exporter, simple_processor=True)
    nc = await connect_nats(isolated["nats_url"], "test")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    publishers = {}
    for s in make_samples(40):
        with gateway_tel.span(f"publish {s.request_id}", kind=SpanKind.PRODUCER) as span:
            headers = trace_context.inject({"Nats-Msg-Id": s.request_id})
            await js.publish(names.samples(s.pool), s.encode(), headers=headers)
        publishers[span.get_span_context().span_id] = span.get_span_context().trace_id
    await js.publish(names.samples("default"), b"not json", headers={"Nats-Msg-Id": "bad"})

    svc = TrainerService(trainer_settings(isolated), telemetry=trainer_tel)
    await svc.start()
    try:
        await eventually(lambda: svc.last_version == "v1")
    finally:
        await svc.stop()
        await nc.close()

    spans = exporter.get_finished_spans()
    consumed = [s for s in spans if s.kind == SpanKind.CONSUMER]
    assert len(consumed) == 41
    by_outcome = {}
    for s in consumed:
        by_outcome.setdefault(s.attributes["headroom.sample.outcome"], []).append(s)
        assert s.attributes["messaging.system"] == "nats"
        assert s.attributes["messaging.destination.name"] == names.samples("default")
        assert s.resource.attributes["service.name"] == "headroom-trainer"
    assert len(by_outcome["added"]) == 40 and len(by_outcome["not_json"]) == 1
    for s in by_outcome["added"]:  # child of the publisher's span, in the request's trace
        assert s.parent.is_remote and publishers[s.parent.span_id] == s.context.trace_id
    assert by_outcome["not_json"][0].parent is None

    (fit,) = [s for s in spans if s.name == "trainer.fit"]
    assert fit.parent is None
    assert {(link.context.trace_id, link.context.span_id) for link in fit.links} == {
        (t, sp) for sp, t in publishers.items()
    }
    assert fit.attributes["headroom.trainer.decision"] == "promote"
    assert fit.attributes["headroom.model.version"] == "v1"
    assert fit.attributes["headroom.trainer.samples"] == 40
    assert fit.attributes["headroom.trainer.mape.ttft"] > 0
