"""A small aiohttp server exposing /health and /metrics for the non-HTTP services
(predictor, trainer, collector). The gateway and the simulator serve these on their own app.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def add_admin_routes(
    app: web.Application, registry: CollectorRegistry, health: Callable[[], dict]
) -> None:
    """``health()`` returns a dict with at least ``ready: bool``; 503 while not ready."""

    async def _health(_: web.Request) -> web.Response:
        body = health()
        return web.json_response(body, status=200 if body.get("ready") else 503)

    async def _metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)


async def start_admin_server(
    host: str, port: int, registry: CollectorRegistry, health: Callable[[], dict]
) -> web.AppRunner:
    app = web.Application()
    add_admin_routes(app, registry, health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
