"""The scraper against real HTTP servers on 127.0.0.1 (no NATS): parsed values, every failure
reason, keep-alive reuse."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from services.collector.discovery import PodTarget
from services.collector.scraper import Scraper
from shared.embedded import free_port
from tests.unit.test_collector_parsers import MODEL, vllm_page


class FakePod:
    """An aiohttp app serving a /metrics page the test controls."""

    def __init__(self) -> None:
        self.page = vllm_page()
        self.status = 200
        self.hang: asyncio.Event | None = None
        self.peers: list[tuple] = []
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.models: dict | None = None  # the /v1/models body (None: 404)
        self.model_calls = 0

    async def _models(self, request: web.Request) -> web.Response:
        self.model_calls += 1
        if self.models is None:
            raise web.HTTPNotFound()
        return web.json_response(self.models)

    async def _metrics(self, request: web.Request) -> web.Response:
        self.peers.append(request.transport.get_extra_info("peername"))
        if self.hang is not None:
            await self.hang.wait()
        return web.Response(text=self.page, status=self.status, content_type="text/plain")

    async def start(self) -> FakePod:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        if self.hang is not None:
            self.hang.set()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@pytest.fixture
async def pod():
    p = await FakePod().start()
    yield p
    await p.stop()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


async def test_scrape_ok_with_keepalive(pod, session):
    pod.page = vllm_page(waiting=4, running=9, kv=0.5, hits=10, queries=40, lora_running="a,b")
    scraper = Scraper(session, timeout_s=5.0, clock=lambda: 42.0)
    target = PodTarget("pod-0", pod.url)
    for _ in range(3):
        out = await scraper.scrape(target)
        assert out.reason is None
        r = out.record
        assert (r.name, r.url, r.ready, r.scraped_at, r.error) == (
            "pod-0",
            pod.url,
            True,
            42.0,
            None,
        )
        assert (r.waiting, r.running, r.kv_usage, r.prefix_hit_rate) == (4, 9, 0.5, 0.25)
        assert r.models == [MODEL] and r.engine == "vllm"
        assert out.record.lora_adapters == ["a", "b"]
        assert out.duration_s >= 0
    assert len(pod.peers) == 3 and len(set(pod.peers)) == 1  # one kept-alive connection


async def test_scrape_http_status(pod, session):
    pod.status = 503
    out = await Scraper(session, timeout_s=5.0).scrape(PodTarget("p", pod.url))
    assert out.reason == "http_status" and not out.record.ready
    assert out.record.error_reason == "http_status"
    assert "503" in out.record.error


async def test_scrape_no_metrics(pod, session):
    pod.page = "# HELP nothing here\nprocess_cpu_seconds_total 1.0\n"
    out = await Scraper(session, timeout_s=5.0).scrape(PodTarget("p", pod.url))
    assert out.reason == "no_metrics" and not out.record.ready


async def test_scrape_too_large(pod, session):
    out = await Scraper(session, timeout_s=5.0, max_body_bytes=100).scrape(PodTarget("p", pod.url))
    assert out.reason == "too_large" and not out.record.ready


async def test_scrape_timeout(pod, session):
    pod.hang = asyncio.Event()
    out = await Scraper(session, timeout_s=0.2).scrape(PodTarget("p", pod.url))
    assert out.reason == "timeout" and not out.record.ready
    assert out.record.error.startswith("timeout")
    assert out.record.error_reason == "timeout"  # a miss for the gateway's pod view


async def test_scrape_connection_refused(session):
    url = f"http://127.0.0.1:{free_port()}"
    out = await Scraper(session, timeout_s=5.0).scrape(PodTarget("gone", url))
    assert out.reason == "connect" and not out.record.ready
    assert out.record.error.startswith("connect")
    assert out.record.error_reason == "connect"  # down: not ready at once in the gateway
    out.record.validate()


async def test_scrape_custom_metrics_path(session):
    async def stats(_: web.Request) -> web.Response:
        return web.Response(text=vllm_page(waiting=1))

    app = web.Application()
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        host, port = runner.addresses[0][:2]
        target = PodTarget("p", f"http://{host}:{port}")
        out = await Scraper(session, timeout_s=5.0, metrics_path="/stats").scrape(target)
        assert out.reason is None and out.record.waiting == 1.0
    finally:
        await runner.cleanup()


async def test_context_length_from_the_model_list(pod, session):
    pod.models = {"object": "list", "data": [
        {"id": MODEL, "object": "model", "max_model_len": 8192},
        {"id": "lora-a", "object": "model", "max_model_len": 8192, "parent": MODEL},
    ]}  # fmt: skip
    now = [0.0]
    scraper = Scraper(session, timeout_s=5.0, model_info_refresh_s=60.0, timer=lambda: now[0])
    target = PodTarget("pod-0", pod.url)
    for _ in range(3):  # read once, then cached
        out = await scraper.scrape(target)
        assert out.reason is None and out.record.max_model_len == 8192
    assert pod.model_calls == 1
    now[0] = 61.0  # due again: a changed value is picked up
    pod.models["data"][0]["max_model_len"] = pod.models["data"][1]["max_model_len"] = 4096
    assert (await scraper.scrape(target)).record.max_model_len == 4096
    assert pod.model_calls == 2
    # a failing model list keeps the known value and is retried sooner than the refresh
    now[0] = 130.0
    pod.models = None
    assert (await scraper.scrape(target)).record.max_model_len == 4096
    assert pod.model_calls == 3
    now[0] = 131.0
    assert (await scraper.scrape(target)).record.max_model_len == 4096
    assert pod.model_calls == 3
    now[0] = 136.0
    await scraper.scrape(target)
    assert pod.model_calls == 4
    scraper.forget("pod-0")  # a pod that left is forgotten
    assert (await scraper.scrape(target)).record.max_model_len is None


async def test_no_model_list_never_fails_the_scrape(pod, session):
    out = await Scraper(session, timeout_s=5.0).scrape(PodTarget("p", pod.url))
    assert out.reason is None and out.record.ready and out.record.max_model_len is None
    off = Scraper(session, timeout_s=5.0, model_info_path="")
    assert (await off.scrape(PodTarget("q", pod.url))).record.max_model_len is None
    assert pod.model_calls == 1  # "" turns the model list off


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        ({"data": [{"max_model_len": 5}, {"max_model_len": 3}]}, 3),
        ({"data": [{"id": "m"}]}, None),
        ({"data": [{"max_model_len": True}, {"max_model_len": -1}, {"max_model_len": "9"}]}, None),
        ({"data": "x"}, None),
        ([], None),
    ],
)
def test_max_model_len_of_a_model_list(models, expected):
    from services.collector.scraper import max_model_len

    assert max_model_len(models) == expected


async def test_context_length_from_a_pod_that_wants_an_api_key(session, tmp_path):
    """A pod started with an API key (vLLM --api-key, here the simulator's) protects
    /v1/models but not /metrics: the collector presents the configured pod key there, and
    without it still scrapes the pod, only without its context length."""
    from services.collector.settings import CollectorSettings
    from services.simulator.server import start_pod

    sim = await start_pod("keyed", api_keys=["pod-key-1"])
    try:
        target = PodTarget("keyed", sim.url)
        bare = Scraper(session, timeout_s=5.0)
        out = await bare.scrape(target)
        assert out.reason is None and out.record.ready and out.record.max_model_len is None
        key_file = tmp_path / "pod-key"
        key_file.write_text("pod-key-1\n")
        creds = CollectorSettings(pod_api_key_file=str(key_file)).pod_credentials()
        creds.load()
        keyed = Scraper(session, timeout_s=5.0, credentials=creds)
        out = await keyed.scrape(target)
        assert out.reason is None and out.record.max_model_len == sim.engine.max_request_tokens
    finally:
        await sim.stop()


def test_collector_pod_credentials_from_settings():
    from pydantic import SecretStr

    from services.collector.settings import CollectorSettings
    from shared.pod_credentials import PodCredentialError

    assert CollectorSettings().pod_credentials().authorization({}) is None
    creds = CollectorSettings(pod_api_key=SecretStr("k-1")).pod_credentials()
    assert creds.authorization({"authorization": "Bearer client"}) == "Bearer k-1"
    assert "k-1" not in repr(CollectorSettings(pod_api_key=SecretStr("k-1")))
    with pytest.raises(PodCredentialError, match="HEADROOM_COLLECTOR_POD_API_KEY"):
        CollectorSettings(pod_api_key=SecretStr("k-1"), pod_api_key_file="/x").pod_credentials()
