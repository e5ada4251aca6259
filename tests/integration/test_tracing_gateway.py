"""One trace per request across the gateway, NATS, a real predictor and a real (simulated)
pod: in-memory span exporter, real NATS and Redis, a published model.

Also: the decision-explanation headers, trace ids in the JSON logs, coalesced prediction
requests linking every caller, and the gateway's /metrics passing the metric-name lint.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.gateway.server import RunningGateway, start_gateway
from services.gateway.settings import GatewaySettings
from services.predictor.service import PredictorService
from services.simulator.server import start_pod
from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from shared.bus import connect_nats, connect_redis
from shared.logs import JsonFormatter
from shared.model_store import next_version, publish_version
from shared.schemas import PodRecord, PodSnapshot
from shared.telemetry import Telemetry, setup_telemetry
from tests.integration.trainer_harness import eventually, predictor_settings
from tests.unit.test_metrics_lint import lint_exposition
from tests.unit.trainer_synth import synthetic_samples

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "p1"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}


def _tel(exporter: InMemorySpanExporter, service: str) -> Telemetry:
    return setup_telemetry(
        service, pool=POOL, env={}, span_exporter=exporter, simple_processor=True
    )


@dataclass
class Stack:
    gateway: RunningGateway
    predictor: PredictorService
    http: aiohttp.ClientSession
    exporter: InMemorySpanExporter

    async def post(self, body: dict, headers: dict | None = None):
        async with self.http.post(
            self.gateway.url + "/v1/chat/completions", json=body, headers=headers or {}
        ) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


async def _publish_model(isolated: dict) -> str:
    names = isolated["names"]
    r = connect_redis(isolated["redis_url"])
    try:
        cfg = FitConfig(rounds=5)
        data = TrainingData.from_samples(synthetic_samples(40, seed=1, prefix="m-"))
        version = await next_version(r, names)
        meta, blobs = build_meta(version, 1.0, run_cycle(data, None, cfg), cfg)
        await publish_version(r, names, meta, blobs)
        return version
    finally:
        await r.aclose()


@asynccontextmanager
async def traced_stack(isolated: dict, *, traced: bool = True, **overrides) -> AsyncIterator[Stack]:
    """A published model, a real predictor, two simulated pods and the gateway, in process;
    ``traced`` False runs them with tracing off."""
    names = isolated["names"]
    exporter = InMemorySpanExporter()

    def tel(service: str) -> Telemetry:
        return _tel(exporter, service) if traced else Telemetry.disabled(service)

    # a profile whose scorer reads the predictions (headroom asks for none without SLOs)
    overrides.setdefault("profile", "llmd-predicted")
    version = await _publish_model(isolated)
    pred = PredictorService(predictor_settings(isolated, "replica-a"), telemetry=tel("predictor"))
    pods, gw, nc, http = [], None, None, None
    await pred.start()
    try:
        assert pred.slot.version == version
        for i in range(2):
            pods.append(
                await start_pod(f"pod-{i}", seed=i, model=MODEL, telemetry=tel("simulator"))
            )
        settings = GatewaySettings(
            nats_url=isolated["nats_url"],
            namespace=names.namespace,
            pool=POOL,
            host="127.0.0.1",
            port=0,
            stale_after_s=60.0,
            predict_timeout_ms=2000,
            **overrides,
        )
        gw = await start_gateway(settings, port=0, rng=random.Random(0), telemetry=tel("gateway"))
        nc = await connect_nats(isolated["nats_url"], "test")
        now = time.time()
        snap = PodSnapshot(
            pool=POOL,
            ts=now,
            pods=[
                PodRecord(name=p.name, url=p.url, ready=True, scraped_at=now, models=[MODEL])
                for p in pods
            ],
        )
        await nc.publish(names.pod_snapshots(POOL), snap.encode())
        await nc.flush()
        await eventually(lambda: gw.gateway.view.counts(time.time()).ready == 2, within=5)
        http = aiohttp.ClientSession()
        yield Stack(gw, pred, http, exporter)
    finally:
        if http is not None:
            await http.close()
        if gw is not None:
            await gw.stop()
        if nc is not None:
            await nc.close()
        for p in pods:
            await p.stop()
        await pred.stop()


def _one(spans: list[ReadableSpan], pred) -> ReadableSpan:
    found = [s for s in spans if pred(s)]
    assert len(found) == 1, [(s.name, s.kind) for s in found] or [s.name for s in spans]
    return found[0]


def _service(s: ReadableSpan) -> str:
    return s.resource.attributes["service.name"]


def _is_gateway_request(s: ReadableSpan) -> bool:
    return s.kind == SpanKind.SERVER and _service(s) == "headroom-gateway"


def _is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    return child.parent is not None and child.parent.span_id == parent.context.span_id


async def test_one_trace_spans_gateway_scheduling_predictor_and_pod(isolated):
    async with traced_stack(isolated) as st:
        status, headers, body = await st.post(CHAT)
        assert status == 200, body
        assert headers["x-headroom-routing"] == "predicted"
        trace_id = int(headers["x-headroom-trace-id"], 16)
        await eventually(
            lambda: any(
                s.kind == SpanKind.SERVER and _service(s) == "headroom-gateway" for s in st.spans()
            ),
            within=5,
        )
        spans = [s for s in st.spans() if s.context.trace_id == trace_id]

    server = _one(spans, lambda s: s.kind == SpanKind.SERVER and _service(s) == "headroom-gateway")
    assert server.parent is None and server.attributes["http.route"] == "/v1/chat/completions"
    route = _one(spans, lambda s: s.name == "gateway.route")
    schedule = _one(spans, lambda s: s.name == "gateway.schedule")
    client = _one(spans, lambda s: s.kind == SpanKind.CLIENT and s.name.endswith(".predict"))
    served = _one(
        spans, lambda s: _service(s) == "headroom-predictor" and s.kind == SpanKind.SERVER
    )
    inference = _one(spans, lambda s: s.name == "predictor.inference")
    pod_call = _one(spans, lambda s: s.kind == SpanKind.CLIENT and "headroom.pod" in s.attributes)
    pod_served = _one(spans, lambda s: _service(s) == "headroom-simulator")
    plugins = [s for s in spans if s.attributes.get("headroom.plugin.type")]

    # parents: request -> route -> (predict CLIENT -> predictor SERVER, schedule -> plugins);
    # request -> pod call
    assert _is_child(route, server)
    assert _is_child(client, route) and _is_child(schedule, route)
    assert _is_child(served, client) and served.parent.is_remote and _is_child(inference, served)
    assert plugins and all(_is_child(p, schedule) for p in plugins)
    assert _is_child(pod_call, server)
    assert _is_child(pod_served, pod_call) and pod_served.kind == SpanKind.SERVER
    assert pod_call.start_time >= route.end_time  # dispatched after the decision

    # attributes (semantic conventions where they exist)
    assert client.attributes["messaging.system"] == "nats"
    assert (
        served.attributes["messaging.destination.name"]
        == client.attributes["messaging.destination.name"]
    )
    assert served.attributes["headroom.model.version"] == "v1"
    assert route.attributes["gen_ai.request.model"] == MODEL
    assert route.attributes["headroom.routing.path"] == "predicted"
    assert route.attributes["headroom.pod"] == headers["x-headroom-pod"]
    assert pod_call.attributes["headroom.pod"] == headers["x-headroom-pod"]
    assert pod_call.attributes["http.response.status_code"] == 200
    assert pod_call.attributes["gen_ai.usage.input_tokens"] > 0

    # decision explanation: the chosen pod's predictions, no per-candidate detail by default
    assert float(headers["x-headroom-predicted-ttft-ms"]) > 0
    assert float(headers["x-headroom-predicted-tpot-ms"]) > 0
    assert "x-headroom-candidates" not in headers


async def test_debug_header_explains_every_candidate(isolated):
    async with traced_stack(isolated) as st:
        status, headers, _ = await st.post(CHAT, {"x-headroom-debug": "1"})
    assert status == 200
    entries = [e.split(";") for e in headers["x-headroom-candidates"].split(", ")]
    assert {e[0] for e in entries} == {"pod-0", "pod-1"}
    assert entries[0][0] == headers["x-headroom-pod"]  # best first
    fields = dict(kv.split("=") for kv in entries[0][1:])
    assert float(fields["ttft_ms"]) > 0 and float(fields["tpot_ms"]) > 0
    assert "score" in fields and "prefix" in fields


async def test_coalesced_prediction_links_every_caller(isolated):
    async with traced_stack(isolated) as st:
        results = await asyncio.gather(*(st.post(CHAT) for _ in range(12)))
        assert all(r[0] == 200 for r in results)
        await eventually(
            lambda: sum(1 for s in st.spans() if _is_gateway_request(s)) == 12, within=5
        )
        spans = st.spans()
    clients = {
        (s.context.trace_id, s.context.span_id)
        for s in spans
        if s.kind == SpanKind.CLIENT and s.name.endswith(".predict")
    }
    assert len(clients) == 12
    linked = set()
    for s in spans:
        if _service(s) == "headroom-predictor" and s.kind == SpanKind.SERVER:
            parent = (s.context.trace_id, s.parent.span_id)
            assert parent in clients
            links = {(link.context.trace_id, link.context.span_id) for link in s.links}
            assert not links or parent in links
            linked |= links | {parent}
    assert linked == clients  # every caller's trace reaches the predictor span that served it


class _JsonLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter("gateway"))
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))


async def test_failed_attempts_are_traced_and_logged_with_the_trace_id(isolated):
    handler = _JsonLines()
    proxy_log = logging.getLogger("services.gateway.proxy")
    proxy_log.addHandler(handler)
    try:
        async with traced_stack(isolated) as st:
            for p in ("pod-0", "pod-1"):  # each pod fails its next request before any token
                url = st.gateway.gateway.view.record(p).url
                async with st.http.post(f"{url}/sim/fault", json={"mode": "error"}) as r:
                    assert r.status == 200, await r.text()
            status, _, _ = await st.post(CHAT)
            assert status == 502
            await eventually(lambda: sum(_is_gateway_request(s) for s in st.spans()) == 1)
            spans = st.spans()
    finally:
        proxy_log.removeHandler(handler)
    server = _one(spans, _is_gateway_request)
    trace_id = f"{server.context.trace_id:032x}"
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT and "headroom.pod" in s.attributes]
    assert sorted(s.attributes["headroom.attempt"] for s in attempts) == [0, 1]
    for s in attempts:
        assert _is_child(s, server) and not s.status.is_ok
        assert s.attributes["error.type"] == "http_500"
    failures = [line for line in handler.lines if "failed before the first byte" in line["msg"]]
    assert len(failures) == 2
    assert all(line["trace_id"] == trace_id for line in failures)


async def test_gateway_metrics_name_the_model_version_and_pass_the_lint(isolated):
    async with traced_stack(isolated) as st:
        status, _, _ = await st.post(CHAT)
        assert status == 200
        async with st.http.get(st.gateway.url + "/metrics") as r:
            text = await r.text()
    names, problems = lint_exposition(text)
    assert not problems, problems
    assert 'headroom_gateway_model_version_info{version="v1"} 1.0' in text
    assert "headroom_gateway_predict_batches" in names  # the predictor client's metrics
