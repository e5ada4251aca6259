"""`make up` with OTEL_EXPORTER_OTLP_ENDPOINT set exports traces: the launcher's real
processes (simulator, collector, predictor, trainer, gateway) send OTLP/HTTP to a sink run by
this test, and one request's trace holds the gateway's, the predictor's and the pod's spans
with the parents right."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest
from aiohttp import web

from services.launcher import Stack, StackConfig
from shared import embedded
from shared.subjects import Names
from tests.conftest import _cleanup
from tests.integration.otlp_sink import Sink

pytestmark = pytest.mark.e2e
KIND_SERVER, KIND_CLIENT = 2, 3  # OTLP protobuf SpanKind values


async def _until(cond, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def test_the_stack_exports_one_trace_per_request(infra):
    sink = Sink()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", sink.receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = embedded.free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    names = Names(f"trexp-{uuid.uuid4().hex[:10]}")
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    logs: list[str] = []
    stack = Stack(
        StackConfig(
            nats_url=infra["nats_url"],
            redis_url=infra["redis_url"],
            namespace=names.namespace,
            gateway_port=embedded.free_port(),
            pods=1,
            predictors=1,
            log_level="WARNING",
            restart=False,
            env={
                "*": otel,
                "gateway": {
                    # a profile that asks the predictors on every request (headroom asks
                    # only for sheddable SLO requests), so the trace reaches the predictor
                    "HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "1000",
                    "HEADROOM_GATEWAY_PROFILE": "headroom-learned",
                },
            },
        ),
        log=logs.append,
    )
    try:
        await asyncio.to_thread(stack.start)
        body = {"model": stack.config.model, "prompt": "Say hello", "max_tokens": 4}
        async with aiohttp.ClientSession() as http:
            async with http.post(stack.gateway_url + "/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                trace_id = r.headers["x-headroom-trace-id"]
                assert r.headers["x-headroom-fallback-reason"] == "no_model"  # no model yet

        def complete() -> bool:
            return {"headroom-gateway", "headroom-predictor", "headroom-simulator"} <= {
                svc for svc, _ in sink.trace(trace_id)
            }

        await _until(complete)
    except Exception:
        print("\n".join(logs[-100:]))
        raise
    finally:
        await asyncio.to_thread(stack.stop)
        await runner.cleanup()
        await _cleanup(infra, names)

    spans = sink.trace(trace_id)
    by_id = {s.span_id: (svc, s) for svc, s in spans}

    def parent_of(span) -> tuple[str, object]:
        return by_id[span.parent_span_id]

    (served,) = [s for svc, s in spans if svc == "headroom-predictor" and s.kind == KIND_SERVER]
    psvc, predict_call = parent_of(served)
    assert psvc == "headroom-gateway" and predict_call.kind == KIND_CLIENT
    assert parent_of(predict_call)[1].name == "gateway.route"
    (pod,) = [s for svc, s in spans if svc == "headroom-simulator"]
    csvc, pod_call = parent_of(pod)
    assert csvc == "headroom-gateway" and pod_call.kind == KIND_CLIENT and pod_call.name == "POST"
    root = parent_of(pod_call)[1]
    assert root.kind == KIND_SERVER and not root.parent_span_id
    # every service process exported (the collector only for scrapes worth a look)
    assert {"headroom-gateway", "headroom-predictor", "headroom-simulator"} <= sink.services()
