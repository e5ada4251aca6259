"""Test harness for the gateway integration tests: real simulator pods, a real gateway on a
free port, real NATS (the `isolated` fixture); pod snapshots are published by the test."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import yaml
from nats.aio.client import Client as NATS
from prometheus_client.parser import text_string_to_metric_families

from services.gateway.scheduling.config import DEFAULT_CONFIG_PATH
from services.gateway.server import RunningGateway, start_gateway
from services.gateway.settings import GatewaySettings
from services.simulator.server import start_pod
from shared import wire
from shared.bus import connect_nats
from shared.schemas import PodRecord, PodSnapshot, TrainingSample
from shared.subjects import Names
from tests.integration.nats_routing import PROBE, until_routed

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "p1"


async def wait_for(cond: Callable[[], bool], timeout_s: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.01)


@dataclass
class Stack:
    names: Names
    nc: NATS
    gateway: RunningGateway
    pods: list[Any]
    http: aiohttp.ClientSession
    loads: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def gw(self):
        return self.gateway.gateway

    def pod(self, name: str) -> Any:
        return next(p for p in self.pods if p.name == name)

    async def snapshot(
        self,
        *,
        ready: dict[str, bool] | None = None,
        loads: dict[str, dict[str, float]] | None = None,
        models: list[str] | None = None,
        pods: list[Any] | None = None,
    ) -> None:
        """Publish a snapshot of ``pods`` (default all) and wait until the gateway applied it."""
        now = time.time()
        if loads is not None:
            self.loads = loads
        records = [
            PodRecord(
                name=p.name, url=p.url, ready=(ready or {}).get(p.name, True), scraped_at=now,
                models=list(models if models is not None else [MODEL]),
                **self.loads.get(p.name, {}),
            )
            for p in (self.pods if pods is None else pods)
        ]  # fmt: skip
        snap = PodSnapshot(pool=POOL, ts=now, pods=records)
        await self.nc.publish(self.names.pod_snapshots(POOL), snap.encode())
        await self.nc.flush()
        view = self.gw.view

        def applied() -> bool:
            return all(
                (r := view.record(rec.name)) is not None and r.scraped_at == now for rec in records
            ) and view.counts(time.time()).total == len(records)

        await wait_for(applied, what="snapshot applied")

    async def fault(self, pod: str, **body: Any) -> None:
        async with self.http.post(f"{self.pod(pod).url}/sim/fault", json=body) as r:
            assert r.status == 200, await r.text()

    async def post(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.http.post(
            self.url + path,
            data=data,
            headers={"content-type": "application/json", **(headers or {})},
        ) as r:
            raw = await r.read()
            return (
                r.status,
                {k.lower(): v for k, v in r.headers.items()},
                orjson.loads(raw) if raw else None,
            )

    async def stream(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], list[Any]]:
        """POST and read SSE events: decoded JSON objects, "[DONE]" as the string."""
        events: list[Any] = []
        async with self.http.post(self.url + path, json=body, headers=headers) as r:
            if r.status != 200:
                return (
                    r.status,
                    {k.lower(): v for k, v in r.headers.items()},
                    [orjson.loads(await r.read())],
                )
            async for line in r.content:
                line = line.strip()
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
            return r.status, {k.lower(): v for k, v in r.headers.items()}, events

    async def metrics(self) -> dict[tuple[str, tuple], float]:
        async with self.http.get(self.url + "/metrics") as r:
            text = await r.text()
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    async def samples(self, n: int, timeout_s: float = 5.0) -> list[tuple[TrainingSample, dict]]:
        """The first ``n`` messages of the samples stream (waits until they are there)."""
        js = self.nc.jetstream()
        stream = self.names.samples_stream

        async def count() -> int:
            return (await js.stream_info(stream)).state.messages

        deadline = time.monotonic() + timeout_s
        while await count() < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {n} samples, stream has {await count()}")
            await asyncio.sleep(0.02)
        out = []
        for seq in range(1, n + 1):
            m = await js.get_msg(stream, seq)
            out.append((TrainingSample.decode(m.data), dict(m.headers or {})))
        return out

    async def sample_count(self) -> int:
        """Samples in the stream once the gateway has handed over all it holds (samples are
        published in batches: services/gateway/samples.py)."""
        await wait_for(lambda: self.gw.samples.pending == 0, what="samples handed over")
        return (await self.nc.jetstream().stream_info(self.names.samples_stream)).state.messages


def metric(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


@asynccontextmanager
async def gateway_stack(
    isolated: dict,
    n_pods: int = 2,
    seed: int = 0,
    pod_keys: Sequence[str] = (),
    *,
    allow_own_pods: bool = False,
    **overrides: Any,
) -> AsyncIterator[Stack]:
    """``pod_keys``: the pods require one of these bearer keys on /v1/* (vLLM --api-key).
    ``allow_own_pods``: the gateway's pod allowlist admits exactly the pods started here."""
    names: Names = isolated["names"]
    # snapshots are published by hand: keep them fresh however slow the box is
    overrides.setdefault("stale_after_s", 60.0)
    pods = []
    nc = gw = http = None
    try:
        for i in range(n_pods):
            pods.append(await start_pod(f"pod-{i}", seed=i, model=MODEL, api_keys=pod_keys))
        if allow_own_pods:
            overrides["pod_allow_urls"] = ",".join(p.url for p in pods)
        settings = GatewaySettings(
            nats_url=isolated["nats_url"], namespace=names.namespace, pool=POOL,
            host="127.0.0.1", port=0, **overrides,
        )  # fmt: skip
        gw = await start_gateway(settings, port=0, rng=random.Random(seed))
        nc = await connect_nats(isolated["nats_url"], "gateway-test")
        http = aiohttp.ClientSession()
        yield Stack(names, nc, gw, pods, http)
    finally:
        if http is not None:
            await http.close()
        if gw is not None:
            await gw.stop()
        if nc is not None:
            await nc.close()
        for p in pods:
            await p.stop()


def flow_profiles(tmp_path, **flow: Any) -> str:
    """The shipped profiles with the ``headroom`` profile's flow control closing a pod as
    soon as any prefill is in flight there (``maxBacklogS`` 1 ms, overridable) and no
    prediction call (no predictor in these tests)."""
    doc = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    for p in doc["profiles"]:
        if p["name"] == "headroom":
            p["plugins"] = [r for r in p["plugins"] if r["pluginRef"] != "latency-producer"]
            p["flowControl"] = {"enabled": True, "maxBacklogS": 0.001, **flow}
    path = tmp_path / "profiles.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


PREDICTED = "predicted-headroom"  # a deterministic predicted-headroom profile for tests


def predicted_profiles(tmp_path) -> str:
    """The shipped profiles plus ``predicted-headroom``: producer, admitter, SLO tier
    filter, latency scorer (``most``) and max-score picker. It exercises the predicted-SLO
    machinery llm-d's profile has, without its weighted-random pick, so tests can expect one
    pod."""
    doc = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    doc["plugins"].append(
        {
            "type": "latency-scorer",
            "name": "most-latency-scorer",
            "parameters": {"strategy": "most"},
        }
    )
    doc["profiles"].append({"name": PREDICTED, "plugins": [
        {"pluginRef": "latency-producer"}, {"pluginRef": "latency-slo-admitter"},
        {"pluginRef": "slo-headroom-tier-filter"}, {"pluginRef": "most-latency-scorer"},
        {"pluginRef": "max-score-picker"},
    ]})  # fmt: skip
    path = tmp_path / "profiles-predicted.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


Responder = Callable[[list[list[float]]], Awaitable[bytes | None]]


@asynccontextmanager
async def predictor(stack: Stack, respond: Responder) -> AsyncIterator[list[list[list[float]]]]:
    """A small real NATS responder on the predict subject; yields the rows it was asked."""
    seen: list[list[list[float]]] = []

    async def cb(msg) -> None:
        if msg.data == PROBE:
            await msg.respond(b"")
            return
        rows = wire.request_rows(msg.data)
        seen.append(rows)
        reply = await respond(rows)
        if reply is not None:
            await msg.respond(reply)

    sub = await stack.nc.subscribe(stack.names.predict, queue=stack.names.predict_queue, cb=cb)
    await stack.nc.flush()
    await until_routed(stack.nc, stack.names.predict)
    try:
        yield seen
    finally:
        await sub.unsubscribe()
        await stack.nc.flush()  # the server has dropped the interest before the next request
