"""FastAPI application: OpenAI routes, /v1/models, /health, /metrics."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from services.gateway.gateway import Gateway
from services.gateway.proxy import handle
from services.gateway.settings import GatewaySettings
from shared.telemetry import Telemetry


def _json(obj: object, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def create_app(
    settings: GatewaySettings,
    *,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.time,
    telemetry: Telemetry | None = None,
) -> FastAPI:
    """The gateway app; NATS, the JetStream stream, the snapshot subscription and the pods'
    HTTP session are set up in the lifespan. ``app.state.gateway`` is the :class:`Gateway`."""
    gw = Gateway(settings, rng=rng, clock=clock, telemetry=telemetry)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    app = FastAPI(title="Headroom gateway", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw
    if gw.tel.enabled:  # the request's SERVER span (the parent of the gateway's spans)
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app,
            tracer_provider=gw.tel.tracer_provider,
            meter_provider=gw.tel.meter_provider,
            excluded_urls="/health,/metrics",
            exclude_spans=["receive", "send"],
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(gw, request, "completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await handle(gw, request, "chat")

    @app.get("/v1/models")
    async def models() -> Response:
        gw.metrics.requests.labels("/v1/models", "200").inc()
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "headroom"}
            for m in gw.view.ready_models()
        ]
        return _json({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> Response:
        counts = gw.view.counts(gw.clock())
        ok = gw.nats_connected
        body = {
            "status": "ok" if ok else "nats_disconnected",
            "nats_connected": ok,
            "pool": settings.pool,
            "pods": {
                "ready": counts.ready,
                "not_ready": counts.not_ready,
                "stale": counts.stale,
                "total": counts.total,
            },
            "in_flight": gw.view.total_in_flight(),
        }
        return _json(body, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        gw.update_pod_gauges()
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
