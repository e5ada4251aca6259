"""The gateway's ASGI application: the proxy routes (``POST /v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``) served directly by services/gateway/proxy.py,
everything else (/v1/models, /livez, /readyz, /health, /metrics, 404/405s) by a FastAPI app.

Probes (services/gateway/readiness.py): ``/livez`` is 200 while the process serves HTTP;
``/readyz`` is 200 while the replica should get traffic (started, not draining, NATS
connected or briefly down with pods to route on); ``/health`` keeps its meaning for existing
users: 200 while NATS is connected, else 503 (a dependency check, not a probe)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from services.gateway import openapi
from services.gateway.errors import GatewayError, send_error
from services.gateway.gateway import Gateway
from services.gateway.memdebug import MemDebug, is_loopback
from services.gateway.proxy import ENDPOINTS, handle
from services.gateway.settings import GatewaySettings
from shared.runner import GcPauses
from shared.telemetry import Telemetry


def _json(obj: object, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


log = logging.getLogger(__name__)

# request headers that carry credentials: redacted on spans even when an operator captures
# request headers (OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST)
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "api-key", "cookie")


def sanitized_headers() -> list[str]:
    """The credential headers plus whatever OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS
    names (an explicit list replaces the variable's in the instrumentation: keep both)."""
    extra = os.environ.get("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS", "")
    return [*CREDENTIAL_HEADERS, *(h.strip() for h in extra.split(",") if h.strip())]


def _span_details(scope: Scope) -> tuple[str, dict[str, str]]:
    """Name and route of a proxy request's SERVER span (as FastAPI's instrumentation names
    its routes)."""
    return f"{scope['method']} {scope['path']}", {"http.route": scope["path"]}


class GatewayApp:
    """ASGI entry point: proxy routes straight to the handler, the rest to ``api``.
    ``app.state.gateway`` is the :class:`Gateway`."""

    def __init__(self, gw: Gateway, api: FastAPI) -> None:
        self.gateway = gw
        self.api = api
        self.state = api.state
        self._proxy = self._serve_proxy
        if gw.tel.enabled:  # the request's SERVER span (the parent of the gateway's spans)
            from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

            self._proxy = OpenTelemetryMiddleware(
                self._serve_proxy,
                default_span_details=_span_details,
                tracer_provider=gw.tel.tracer_provider,
                meter_provider=gw.tel.meter_provider,
                exclude_spans=["receive", "send"],
                http_capture_headers_sanitize_fields=sanitized_headers(),
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ENDPOINTS and scope["method"] == "POST":
            await self._proxy(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    async def _serve_proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await handle(self.gateway, scope, receive, send)
        except Exception:
            log.exception("unhandled error in %s", scope["path"])
            err = GatewayError(500, "internal gateway error", type="server_error", code="internal")
            with contextlib.suppress(RuntimeError):  # the response had started: uvicorn drops it
                await send_error(send, err)


def create_app(
    settings: GatewaySettings,
    *,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.time,
    telemetry: Telemetry | None = None,
) -> GatewayApp:
    """The gateway app; NATS, the JetStream stream, the snapshot subscription and the pods'
    HTTP session are set up in the lifespan. ``app.state.gateway`` is the :class:`Gateway`."""
    gw = Gateway(settings, rng=rng, clock=clock, telemetry=telemetry)
    gc_pauses = GcPauses(gw.metrics.registry, "headroom_gateway")
    memdebug = MemDebug(settings.debug_tracemalloc) if settings.debug_tracemalloc else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        gc_pauses.install()
        if memdebug is not None:
            memdebug.start()
        try:
            await gw.start()
            yield
        finally:
            await gw.stop()
            gc_pauses.remove()
            if memdebug is not None:
                memdebug.stop()

    app = FastAPI(title="Headroom gateway", lifespan=lifespan, docs_url=None, redoc_url=None)
    openapi.install(app)  # the proxy routes in /openapi.json
    app.state.gateway = gw
    if gw.tel.enabled:  # the request's SERVER span (the parent of the gateway's spans)
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app,
            tracer_provider=gw.tel.tracer_provider,
            meter_provider=gw.tel.meter_provider,
            excluded_urls="/health,/livez,/readyz,/metrics",
            exclude_spans=["receive", "send"],
            http_capture_headers_sanitize_fields=sanitized_headers(),
        )

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        try:  # with a key file: 401 without a key, and only the key's models
            served = gw.front.models_for(request.headers, gw.view.ready_models())
        except GatewayError as e:
            gw.metrics.requests.labels("/v1/models", str(e.status)).inc()
            return Response(orjson.dumps(e.body()), status_code=e.status, headers=e.headers,
                            media_type="application/json")  # fmt: skip
        gw.metrics.requests.labels("/v1/models", "200").inc()
        lengths = gw.view.context_lengths()  # vLLM's max_model_len field, where pods report it
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "headroom"}
            | ({"max_model_len": lengths[m]} if m in lengths else {})
            for m in served
        ]
        return _json({"object": "list", "data": data})

    @app.get("/livez")
    async def livez() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        r = gw.readiness()
        counts = gw.view.counts(gw.clock())
        body = {
            "status": r.status,
            "ready": r.ready,
            "nats_connected": gw.nats_connected,
            "pods": {"ready": counts.ready, "stale": counts.stale, "missed": counts.missed},
        }
        return _json(body, 200 if r.ready else 503)

    @app.get("/health")
    async def health() -> Response:  # as before the probes: 200 iff NATS is connected
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

    if memdebug is not None:  # diagnostics for the soak: loopback clients only

        def _local(request: Request) -> bool:
            return is_loopback(request.client.host if request.client else None)

        @app.post("/debug/tracemalloc/mark")
        async def tracemalloc_mark(request: Request) -> Response:
            if not _local(request):
                return _json({"detail": "Not Found"}, 404)
            return _json(await asyncio.to_thread(memdebug.mark))

        @app.get("/debug/tracemalloc")
        async def tracemalloc_diff(request: Request, top: int = 30) -> Response:
            if not _local(request):
                return _json({"detail": "Not Found"}, 404)
            return _json(await asyncio.to_thread(memdebug.diff, max(1, min(top, 500))))

    return GatewayApp(gw, app)
