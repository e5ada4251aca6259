"""API keys, per-key policy, rotation and pod credentials through the real gateway and
simulator pods (real NATS and Redis, isolated namespace)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from services.gateway.api_keys import ApiKey, KeyPolicy, RateLimit, dump_key_file, new_api_key
from tests.integration.gateway_harness import MODEL, gateway_stack, metric, wait_for

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}
PATH = "/v1/chat/completions"


def write_keys(path: Path, keys: list[ApiKey]) -> None:
    """Replace the key file atomically (what `headroom keys` does)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump_key_file(keys))
    os.replace(tmp, path)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def keyed(tmp_path: Path, *keys: ApiKey, **overrides):
    path = tmp_path / "keys.yaml"
    write_keys(path, list(keys))
    overrides.setdefault("pod_auth", "none")
    return path, {"api_keys_path": str(path), "api_keys_reload_s": 0.05, **overrides}


async def until_status(st, key: str, status: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while True:
        got, _, body = await st.post(PATH, CHAT, bearer(key))
        if got == status:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {status}, still {got}: {body}")
        await asyncio.sleep(0.02)


async def test_401_without_a_valid_key(isolated, tmp_path):
    rec, key = new_api_key("team-a", KeyPolicy())
    _, cfg = keyed(tmp_path, rec)
    async with gateway_stack(isolated, **cfg) as st:
        await st.snapshot()
        for headers, msg in (({}, "You didn't provide"), (bearer(key[:-2] + "zz"), "Incorrect"),
                             ({"authorization": f"Basic {key}"}, "You didn't provide")):  # fmt: skip
            status, h, body = await st.post(PATH, CHAT, headers)
            assert status == 401, body
            assert body["error"]["code"] == "invalid_api_key" and body["error"][
                "message"
            ].startswith(msg)
            assert h["www-authenticate"].startswith("Bearer") and "x-request-id" in h
            assert key[16:24] not in str(body)
        status, _, body = await st.post(PATH, CHAT, bearer(key))
        assert status == 200, body
        status, _, events = await st.stream(PATH, {**CHAT, "stream": True}, bearer(key))
        assert status == 200 and events[-1] == "[DONE]"
        async with st.http.get(st.url + "/v1/models") as r:
            assert r.status == 401
        async with st.http.get(st.url + "/v1/models", headers=bearer(key)) as r:
            assert [m["id"] for m in (await r.json())["data"]] == [MODEL]
        async with st.http.get(st.url + "/health") as r:
            assert r.status == 200  # probes and scrapes need no key
        m = await st.metrics()
        assert metric(m, "headroom_gateway_auth_failures_total", reason="missing") == 3
        assert metric(m, "headroom_gateway_auth_failures_total", reason="invalid") == 1
        assert metric(m, "headroom_gateway_requests_total", endpoint=PATH, status="401") == 3
        assert metric(m, "headroom_gateway_api_keys") == 1


async def test_per_key_model_profile_priority_and_debug_policy(isolated, tmp_path):
    other, other_key = new_api_key("other-models", KeyPolicy(models=("mistralai/*",)))
    limited, key = new_api_key(
        "limited", KeyPolicy(profiles=frozenset({"round-robin"}), priority=(-5, 5))
    )
    debug, debug_key = new_api_key("debugger", KeyPolicy(debug=True, models=("meta-llama/*",)))
    _, cfg = keyed(tmp_path, other, limited, debug)
    async with gateway_stack(isolated, **cfg) as st:
        await st.snapshot()
        # model: 404 as OpenAI answers a model the key cannot use; /v1/models agrees
        status, _, body = await st.post(PATH, CHAT, bearer(other_key))
        assert status == 404 and body["error"]["code"] == "model_not_found", body
        async with st.http.get(st.url + "/v1/models", headers=bearer(other_key)) as r:
            assert (await r.json())["data"] == []
        # profile: its allowed one and the active one pass, another is 403
        for profile, want in (("round-robin", 200), ("headroom", 200), ("llmd-predicted", 403)):
            status, h, body = await st.post(
                PATH, CHAT, {**bearer(key), "x-headroom-profile": profile}
            )
            assert status == want, (profile, body)
            if want == 200:
                assert h["x-headroom-profile"] == profile
            else:
                assert body["error"]["param"] == "x-headroom-profile"
                assert body["error"]["code"] == "permission_denied"
        # priority range -5..5
        for prio, want in (("5", 200), ("-5", 200), ("6", 403), ("-6", 403)):
            status, _, body = await st.post(
                PATH, CHAT, {**bearer(key), "x-headroom-priority": prio}
            )
            assert status == want, (prio, body)
        # debug: refused for this key, served with the candidates for the debug key
        status, _, body = await st.post(PATH, CHAT, {**bearer(key), "x-headroom-debug": "1"})
        assert status == 403 and body["error"]["param"] == "x-headroom-debug"
        status, h, _ = await st.post(PATH, CHAT, {**bearer(debug_key), "x-headroom-debug": "1"})
        assert status == 200 and "x-headroom-candidates" in h
        status, h, _ = await st.post(PATH, CHAT, bearer(key))
        assert status == 200 and "x-headroom-candidates" not in h
        m = await st.metrics()
        for what, n in (("model", 1), ("profile", 1), ("priority", 2), ("debug", 1)):
            assert metric(m, "headroom_gateway_policy_denied_total", what=what) == n, what
        assert metric(m, "headroom_gateway_requests_total", endpoint=PATH, status="403") == 4


async def test_keys_rotate_without_restart_file_and_secret_symlink_swap(isolated, tmp_path):
    a, key_a = new_api_key("a", KeyPolicy())
    b, key_b = new_api_key("b", KeyPolicy())
    c, key_c = new_api_key("c", KeyPolicy())
    # a Kubernetes Secret volume: keys.yaml -> ..data/keys.yaml, ..data -> ..<version>/
    mount = tmp_path / "secret"
    (mount / "..v1").mkdir(parents=True)
    (mount / "..v1" / "keys.yaml").write_text(dump_key_file([a]))
    (mount / "..data").symlink_to("..v1")
    (mount / "keys.yaml").symlink_to("..data/keys.yaml")
    cfg = {"api_keys_path": str(mount / "keys.yaml"), "api_keys_reload_s": 0.05, "pod_auth": "none"}
    async with gateway_stack(isolated, **cfg) as st:
        await st.snapshot()
        assert (await st.post(PATH, CHAT, bearer(key_a)))[0] == 200
        assert (await st.post(PATH, CHAT, bearer(key_b)))[0] == 401
        # the Secret is updated: a new directory, then the ..data link is swapped
        (mount / "..v2").mkdir()
        (mount / "..v2" / "keys.yaml").write_text(dump_key_file([b]))
        (mount / "..data.tmp").symlink_to("..v2")
        os.replace(mount / "..data.tmp", mount / "..data")
        await until_status(st, key_b, 200)
        assert (await st.post(PATH, CHAT, bearer(key_a)))[0] == 401  # revoked
        # a broken update keeps the keys in force, and is counted
        (mount / "..v3").mkdir()
        (mount / "..v3" / "keys.yaml").write_text("keys: [")
        (mount / "..data.tmp").symlink_to("..v3")
        os.replace(mount / "..data.tmp", mount / "..data")
        await wait_for(
            lambda: st.gw.metrics.registry.get_sample_value(
                "headroom_gateway_api_key_reloads_total", {"result": "error"}
            ) == 1, what="reload error counted",
        )  # fmt: skip
        assert (await st.post(PATH, CHAT, bearer(key_b)))[0] == 200
        # then an ordinary rewrite of the file the link points to (same path)
        write_keys(mount / "..v3" / "keys.yaml", [b, c])
        await until_status(st, key_c, 200)
        assert (await st.post(PATH, CHAT, bearer(key_b)))[0] == 200


async def test_token_limit_counts_prompt_then_output_tokens(isolated, tmp_path):
    # 600 tokens/min (10/s), bucket 60: the prompt (~10 tokens) fits, the output debt does not
    rec, key = new_api_key("tok", KeyPolicy(tokens=RateLimit(600, 60)))
    _, cfg = keyed(tmp_path, rec, redis_url=isolated["redis_url"])
    async with gateway_stack(isolated, **cfg) as st:
        await st.snapshot()
        body = {**CHAT, "max_tokens": 200}
        status, _, reply = await st.post(PATH, body, bearer(key))
        assert status == 200, reply
        assert reply["usage"]["completion_tokens"] == 200
        # the output tokens are owed from the moment the reply is complete
        status, h, reply = await st.post(PATH, CHAT, bearer(key))
        assert status == 429, reply
        assert (
            reply["error"]["type"] == "tokens" and reply["error"]["code"] == "rate_limit_exceeded"
        )
        assert 10 <= int(h["retry-after"]) <= 22, h  # ~150 tokens of debt at 10/s
        big = {**CHAT, "messages": [{"role": "user", "content": "word " * 100}]}
        status, h, reply = await st.post(PATH, big, bearer(key))
        assert status == 429 and reply["error"]["code"] == "request_too_large"
        assert "retry-after" not in h
        m = await st.metrics()
        assert metric(m, "headroom_gateway_rate_limited_total", key=rec.id, limit="tokens") == 2


async def test_privileged_headers_without_a_key_file(isolated):
    debug = {"x-headroom-debug": "1"}
    async with gateway_stack(isolated) as st:  # default: allow (as before keys existed)
        await st.snapshot()
        status, h, _ = await st.post(PATH, CHAT, {**debug, "x-headroom-priority": "1000"})
        assert status == 200 and "x-headroom-candidates" in h
    async with gateway_stack(isolated, privileged_headers="ignore") as st:
        await st.snapshot()
        status, h, _ = await st.post(PATH, CHAT, {**debug, "x-headroom-profile": "round-robin"})
        assert status == 200 and "x-headroom-candidates" not in h
        assert h["x-headroom-profile"] == "headroom"
    async with gateway_stack(isolated, privileged_headers="reject") as st:
        await st.snapshot()
        for name, value in (("x-headroom-debug", "1"), ("x-headroom-priority", "-1"),
                            ("x-headroom-profile", "round-robin")):  # fmt: skip
            status, _, body = await st.post(PATH, CHAT, {name: value})
            assert status == 403 and body["error"]["param"] == name, body
        assert (await st.post(PATH, CHAT, {"x-headroom-profile": "headroom"}))[0] == 200


async def test_pod_credentials_forward_inject_none(isolated, tmp_path):
    pod_key = "pod-secret-" + "7" * 20
    async with gateway_stack(isolated, pod_keys=[pod_key], pod_auth="none") as st:
        await st.snapshot()
        status, _, body = await st.post(PATH, CHAT, bearer(pod_key))
        assert status == 401 and body == {"error": "Unauthorized"}  # the pod's (vLLM's) 401
    async with gateway_stack(isolated, pod_keys=[pod_key]) as st:  # default: forward
        await st.snapshot()
        assert (await st.post(PATH, CHAT, bearer(pod_key)))[0] == 200
        assert (await st.stream(PATH, {**CHAT, "stream": True}, bearer(pod_key)))[0] == 200
        assert (await st.post(PATH, CHAT))[0] == 401
    async with gateway_stack(
        isolated, pod_keys=[pod_key], pod_auth="inject", pod_api_key=pod_key
    ) as st:
        await st.snapshot()
        assert (await st.post(PATH, CHAT))[0] == 200
        assert (await st.post(PATH, CHAT, bearer("client-credential")))[0] == 200


async def test_client_keys_with_an_injected_pod_key_file_that_rotates(isolated, tmp_path):
    old, new = "pod-old-" + "1" * 20, "pod-new-" + "2" * 20
    key_file = tmp_path / "pod-key"
    key_file.write_text(old + "\n")
    rec, key = new_api_key("a", KeyPolicy())
    _, cfg = keyed(tmp_path, rec, pod_auth="inject", pod_api_key_file=str(key_file))
    async with gateway_stack(isolated, pod_keys=[new], **cfg) as st:
        await st.snapshot()
        status, _, body = await st.post(PATH, CHAT, bearer(key))
        assert status == 401 and body == {"error": "Unauthorized"}  # the pod refuses "old"
        tmp = tmp_path / "pod-key.tmp"
        tmp.write_text(new)
        os.replace(tmp, key_file)
        await until_status(st, key, 200)  # the client's key itself never reaches the pod
