"""The simulator's optional API key behaves like vLLM's --api-key: /v1/* needs one of the
keys as a bearer token (401 {"error": "Unauthorized"} otherwise); /health, /metrics and the
test-control /sim/* routes stay open."""

from __future__ import annotations

import aiohttp

from services.simulator.server import start_pod

BODY = {"prompt": "hello there", "max_tokens": 2}


async def test_api_keys_guard_v1_only():
    pod = await start_pod("pod-k", api_keys=["key-one", "key-two"])
    open_pod = await start_pod("pod-open")
    try:
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "key-one"},
                            {"Authorization": "Basic key-one"}):  # fmt: skip
                async with http.post(pod.url + "/v1/completions", json=BODY, headers=headers) as r:
                    assert r.status == 401 and await r.json() == {"error": "Unauthorized"}
                async with http.get(pod.url + "/v1/models", headers=headers) as r:
                    assert r.status == 401
            for key in ("key-one", "key-two"):  # several keys: rotation without downtime
                auth = {"Authorization": f"bearer {key}"}
                async with http.post(pod.url + "/v1/completions", json=BODY, headers=auth) as r:
                    assert r.status == 200, await r.text()
            for path in ("/health", "/metrics", "/sim/fault"):
                async with http.get(pod.url + path) as r:
                    assert r.status == 200, path
            async with http.post(open_pod.url + "/v1/completions", json=BODY) as r:
                assert r.status == 200  # no key configured: open, as before
    finally:
        await pod.stop()
        await open_pod.stop()


def test_settings_read_vllms_variable_and_split_keys(monkeypatch):
    from services.simulator.settings import SimulatorSettings

    monkeypatch.setenv("VLLM_API_KEY", "a, b")
    assert SimulatorSettings().api_keys() == ["a", "b"]
    monkeypatch.setenv("HEADROOM_SIM_API_KEY", "sim-key-c")
    assert SimulatorSettings().api_keys() == ["sim-key-c"]  # the Headroom name wins
    assert "sim-key-c" not in repr(SimulatorSettings())
