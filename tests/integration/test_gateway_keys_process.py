"""Two gateway processes share one key's rate limit through a real Redis, in front of a
simulator process whose pods require an API key (vLLM ``--api-key``); the gateways inject
the pool's pod key. Every process logs at DEBUG and exports its spans over OTLP (with all
request headers captured on the spans) to a sink run by this test: no client key and no
pod key may appear in any log line, span, /metrics page or response."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import orjson

from services.gateway.api_keys import KeyPolicy, RateLimit, dump_key_file, new_api_key
from shared.bus import connect_nats
from shared.embedded import free_port
from shared.schemas import PodRecord, PodSnapshot
from tests.integration.otlp_sink import running_sink
from tests.integration.service_process import spawn
from tests.unit.test_metrics_lint import lint_exposition

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "p1"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}


class Logged:
    """A service process whose stderr is read as it comes (a full pipe would stall it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.log = bytearray()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, module: str, env: dict[str, str]) -> Logged:
        return cls(await spawn(module, env))

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self.log += chunk

    async def stop(self) -> int:
        """SIGTERM, then SIGKILL after 15 s; the exit code (negative: killed)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await self._reader
        return self.proc.returncode


async def _until_ok(http: aiohttp.ClientSession, url: str, headers=None, within=60.0) -> dict:
    deadline = time.monotonic() + within
    while True:
        try:
            async with http.get(url, headers=headers) as r:
                if r.status == 200:
                    return await r.json()
        except aiohttp.ClientConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} not ready in {within} s")
        await asyncio.sleep(0.05)


async def test_two_gateways_share_a_rate_limit_and_leak_no_credential(isolated, tmp_path: Path):
    names = isolated["names"]
    limited, limited_key = new_api_key("limited", KeyPolicy(requests=RateLimit(4, 4)))
    free, free_key = new_api_key("free", KeyPolicy(tokens=RateLimit(100_000, 100_000)))
    key_file = tmp_path / "keys.yaml"
    key_file.write_text(dump_key_file([limited, free]))
    pod_key = "pod-credential-" + "q" * 24
    pod_key_file = tmp_path / "pod-key"
    pod_key_file.write_text(pod_key + "\n")
    secrets = [limited_key, free_key, pod_key, limited_key[16:], free_key[16:]]

    pod_ports = [free_port(), free_port()]
    gw_ports = [free_port(), free_port()]
    async with running_sink() as sink:
        common = {
            "HEADROOM_NATS_URL": isolated["nats_url"],
            "HEADROOM_REDIS_URL": isolated["redis_url"],
            "HEADROOM_NAMESPACE": names.namespace,
            "HEADROOM_POOL": POOL,
            "HEADROOM_LOG_LEVEL": "DEBUG",
            **sink.env(),
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST": ".*",
        }
        procs: dict[str, Logged] = {}
        envs = {"simulator": ("services.simulator", {
            **common, "HEADROOM_SIM_PORTS": ",".join(map(str, pod_ports)), "VLLM_API_KEY": pod_key,
        })}  # fmt: skip
        for i, port in enumerate(gw_ports):
            envs[f"gateway-{i}"] = ("services.gateway", {
                **common, "HEADROOM_GATEWAY_PORT": str(port),
                "HEADROOM_GATEWAY_STALE_AFTER_S": "60",
                "HEADROOM_GATEWAY_API_KEYS_PATH": str(key_file),
                "HEADROOM_GATEWAY_POD_AUTH": "inject",
                "HEADROOM_GATEWAY_POD_API_KEY_FILE": str(pod_key_file),
            })  # fmt: skip
        gws = [f"http://127.0.0.1:{p}" for p in gw_ports]
        replies: list[bytes] = []
        metrics_pages: list[str] = []
        try:
            for name, (module, env) in envs.items():
                procs[name] = await Logged.start(module, env)
            async with aiohttp.ClientSession() as http:
                for url in gws:
                    await _until_ok(http, url + "/health")
                for port in pod_ports:
                    async with http.post(f"http://127.0.0.1:{port}/v1/completions",
                                         json={"prompt": "x", "max_tokens": 1}) as r:  # fmt: skip
                        assert r.status == 401  # the pods do require their key
                nc = await connect_nats(isolated["nats_url"], "test")
                try:
                    now = time.time()
                    recs = [PodRecord(name=f"pod-{i}", url=f"http://127.0.0.1:{p}", ready=True,
                                      scraped_at=now, models=[MODEL])
                            for i, p in enumerate(pod_ports)]  # fmt: skip
                    await nc.publish(
                        names.pod_snapshots(POOL),
                        PodSnapshot(pool=POOL, ts=now, pods=recs).encode(),
                    )
                    await nc.flush()
                finally:
                    await nc.close()
                auth = {"authorization": f"Bearer {free_key}"}
                for url in gws:  # the snapshot has reached both gateways
                    deadline = time.monotonic() + 10
                    while not (await _until_ok(http, url + "/v1/models", auth))["data"]:
                        assert time.monotonic() < deadline, "no snapshot applied"
                        await asyncio.sleep(0.05)

                async def post(url: str, key: str, body=CHAT, extra=None) -> tuple[int, dict]:
                    headers = {"authorization": f"Bearer {key}", **(extra or {})}
                    async with http.post(url + "/v1/chat/completions", json=body,
                                         headers=headers) as r:  # fmt: skip
                        raw = await r.read()
                        head = {str(k): v for k, v in r.headers.items()}
                        replies.append(raw + orjson.dumps(head))
                        return r.status, {**head, "body": raw}

                # 4 per minute, burst 4, shared: 8 requests alternating over the two gateways
                results = [await post(gws[i % 2], limited_key) for i in range(8)]
                statuses = [s for s, _ in results]
                assert statuses.count(200) == 4 and statuses[:4] == [200] * 4, statuses
                refused = [(i % 2, h) for i, (s, h) in enumerate(results) if s == 429]
                assert {gw for gw, _ in refused} == {0, 1}  # both replicas refuse: one limit
                for _, h in refused:
                    assert 1 <= int(h["Retry-After"]) <= 15, h
                    err = orjson.loads(h["body"])["error"]
                    assert err["code"] == "rate_limit_exceeded" and err["type"] == "requests"
                # the unlimited key, streamed and not, through both; a wrong key; a pod key
                for url in gws:
                    assert (await post(url, free_key))[0] == 200
                    stream = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
                    assert (await post(url, free_key, stream))[0] == 200
                    assert (await post(url, free_key[:-3] + "abc"))[0] == 401
                    assert (await post(url, pod_key))[0] == 401  # a pod key is no client key
                    assert (await post(url, limited_key, extra={"x-headroom-debug": "1"}))[0] == 403
                    async with http.get(url + "/metrics") as r:
                        metrics_pages.append(await r.text())
                deadline = time.monotonic() + 15
                while not {"headroom-gateway", "headroom-simulator"} <= sink.services():
                    assert time.monotonic() < deadline, sink.services()
                    await asyncio.sleep(0.1)
        finally:
            rcs = {name: await proc.stop() for name, proc in procs.items()}
            logs = {name: bytes(proc.log) for name, proc in procs.items()}
            for name, err in logs.items():  # shown on failure
                print(f"--- {name} exited {rcs[name]}; last lines:\n{err.decode()[-1500:]}")
        assert rcs == dict.fromkeys(envs, 0)

    assert any("rate_limited_total" in p and f'key="{limited.id}"' in p for p in metrics_pages)
    for page in metrics_pages:  # the keyed gateway's metrics follow the conventions too
        assert lint_exposition(page)[1] == []
    assert all(b"API keys loaded: 2" in logs[f"gateway-{i}"] for i in range(2))
    # request headers were captured on the spans, the credentials redacted
    captured = [
        a.value for _, s in sink.spans for a in s.attributes
        if a.key == "http.request.header.authorization"
    ]  # fmt: skip
    assert captured, "no span captured the authorization header: the check below would be vacuous"
    assert all(v.array_value.values[0].string_value == "[REDACTED]" for v in captured)
    haystacks = {
        **{f"log:{k}": v for k, v in logs.items()},
        "spans": b"".join(sink.raw),
        "metrics": "".join(metrics_pages).encode(),
        "replies": b"".join(replies),
    }
    assert all(haystacks.values())
    for where, data in haystacks.items():
        for secret in secrets:
            assert secret.encode() not in data, f"a credential leaked into {where}"
