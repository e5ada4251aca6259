"""A minimal OTLP/HTTP trace receiver for tests that export from real processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from shared import embedded


class Sink:
    """(service.name, span) pairs in arrival order, and the raw export requests."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, object]] = []
        self.raw: list[bytes] = []
        self.url = ""

    async def receive(self, request: web.Request) -> web.Response:
        data = await request.read()
        self.raw.append(data)
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(data)
        for rs in msg.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                self.spans.extend((attrs.get("service.name", "?"), s) for s in ss.spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def services(self) -> set[str]:
        return {svc for svc, _ in self.spans}

    def trace(self, trace_id: str) -> list[tuple[str, object]]:
        tid = bytes.fromhex(trace_id)
        return [(svc, s) for svc, s in self.spans if s.trace_id == tid]

    def env(self) -> dict[str, str]:
        """What a process needs to export to this sink."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }


@asynccontextmanager
async def running_sink() -> AsyncIterator[Sink]:
    sink = Sink()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", sink.receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = embedded.free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    sink.url = f"http://127.0.0.1:{port}"
    try:
        yield sink
    finally:
        await runner.cleanup()
