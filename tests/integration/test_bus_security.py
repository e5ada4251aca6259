"""The bus is not an open door (issue 16, done-means 3): NATS and Redis started here with
authentication and TLS (certificates made by the test); every service connects with the
credentials from its settings and fails with a clear message without them; secrets never
show up in logs or errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from services.launcher import DEFAULT_MODEL, Stack, StackConfig
from shared import embedded
from shared.bus import (
    BusAuthError,
    check_redis,
    connect_nats,
    connect_redis,
    ensure_samples_stream,
    redact_url,
)
from shared.settings import CommonSettings
from shared.subjects import Names
from tests.e2e.conftest import metric_value
from tests.e2e.synthetic_model import publish_synthetic_model
from tests.integration.bus_security import (
    Pki,
    make_pki,
    nats_tls_block,
    nkey,
    operator_setup,
    start_secure_nats,
    start_secure_redis,
)
from tests.integration.service_process import ROOT

pytestmark = pytest.mark.timeout(300)

GW_PASSWORD = "gw-" + uuid.uuid4().hex  # unique: a leak is found by searching for it
COLLECTOR_PASSWORD = "co-" + uuid.uuid4().hex
TRAINER_PASSWORD = "tr-" + uuid.uuid4().hex
REDIS_PASSWORD = "rd-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def predictor_nkey(tmp_path_factory) -> tuple[str, str]:
    """(seed file, public key) of the predictors' nkey."""
    seed, public = nkey()
    path = tmp_path_factory.mktemp("nkey") / "predictor.nk"
    path.write_text(seed + "\n")
    path.chmod(0o600)
    return str(path), public


@pytest.fixture(scope="module")
def secure_nats(pki, predictor_nkey):
    """Mutual TLS required; users: gateway, collector, trainer (passwords), predictors (nkey)."""
    users = (
        f'{{user: gateway, password: "{GW_PASSWORD}"}}, '
        f'{{user: collector, password: "{COLLECTOR_PASSWORD}"}}, '
        f'{{user: trainer, password: "{TRAINER_PASSWORD}"}}, '
        f'{{nkey: "{predictor_nkey[1]}"}}'
    )
    srv = start_secure_nats(nats_tls_block(pki) + f"\nauthorization {{ users: [{users}] }}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def secure_redis(pki):
    srv = start_secure_redis(pki, "headroom", REDIS_PASSWORD)
    yield srv
    srv.stop()


def tls_env(pki: Pki) -> dict[str, str]:
    return {
        "HEADROOM_NATS_TLS_CA_FILE": pki.ca,
        "HEADROOM_NATS_TLS_CERT_FILE": pki.client_cert,
        "HEADROOM_NATS_TLS_KEY_FILE": pki.client_key,
        "HEADROOM_REDIS_TLS_CA_FILE": pki.ca,
        "HEADROOM_REDIS_TLS_CERT_FILE": pki.client_cert,
        "HEADROOM_REDIS_TLS_KEY_FILE": pki.client_key,
    }


def settings(url: str, **kw) -> CommonSettings:
    return CommonSettings(nats_url=url, **kw)


# --- connection helpers against the real servers -----------------------------------------
async def _roundtrip(nc) -> None:
    subject = f"sec.{uuid.uuid4().hex}"

    async def pong(msg) -> None:
        await msg.respond(b"pong")

    sub = await nc.subscribe(subject, cb=pong)
    try:
        assert (await nc.request(subject, b"ping", timeout=5)).data == b"pong"
    finally:
        await sub.unsubscribe()
        await nc.close()


async def test_nats_user_password_and_mutual_tls(secure_nats, pki):
    tls = {"nats_tls_ca_file": pki.ca, "nats_tls_cert_file": pki.client_cert,
           "nats_tls_key_file": pki.client_key}  # fmt: skip
    await _roundtrip(await connect_nats(
        settings(secure_nats.url, nats_user="gateway", nats_password=GW_PASSWORD, **tls), "t"
    ))  # fmt: skip

    with pytest.raises(BusAuthError, match="refused the credentials") as e:
        await connect_nats(settings(secure_nats.url, **tls), "no-credentials")
    assert "HEADROOM_NATS_USER" in str(e.value)
    with pytest.raises(BusAuthError, match="refused the credentials") as e:
        await connect_nats(
            settings(secure_nats.url, nats_user="gateway", nats_password="wrong", **tls), "bad"
        )
    assert "wrong" not in str(e.value)

    # TLS: a CA that did not sign the server's certificate, or no client certificate
    bad_ca = {**tls, "nats_tls_ca_file": pki.other_ca}
    with pytest.raises(BusAuthError, match="TLS") as e:
        await connect_nats(
            settings(secure_nats.url, nats_user="gateway", nats_password=GW_PASSWORD, **bad_ca),
            "bad-ca",
        )
    assert "HEADROOM_NATS_TLS_CA_FILE" in str(e.value) and GW_PASSWORD not in str(e.value)
    with pytest.raises(BusAuthError):
        await connect_nats(
            settings(secure_nats.url, nats_user="gateway", nats_password=GW_PASSWORD,
                     nats_tls_ca_file=pki.ca), "no-client-cert",
        )  # fmt: skip


async def test_nats_password_in_the_url_is_redacted_in_errors(secure_nats, pki):
    url = secure_nats.url.replace("tls://", f"tls://gateway:{GW_PASSWORD}x@")
    with pytest.raises(BusAuthError) as e:
        await connect_nats(settings(url, nats_tls_ca_file=pki.ca, nats_tls_cert_file=pki.client_cert,
                                    nats_tls_key_file=pki.client_key), "t")  # fmt: skip
    assert GW_PASSWORD not in str(e.value) and "gateway:***@" in str(e.value)


async def test_nats_nkey_seed_file(secure_nats, pki, predictor_nkey):
    await _roundtrip(await connect_nats(
        settings(secure_nats.url, nats_nkey_seed_file=predictor_nkey[0], nats_tls_ca_file=pki.ca,
                 nats_tls_cert_file=pki.client_cert, nats_tls_key_file=pki.client_key), "nk",
    ))  # fmt: skip
    other_seed, _ = nkey()
    path = Path(predictor_nkey[0]).with_name("unknown.nk")
    path.write_text(other_seed)
    with pytest.raises(BusAuthError, match="refused the credentials"):
        await connect_nats(
            settings(secure_nats.url, nats_nkey_seed_file=str(path), nats_tls_ca_file=pki.ca,
                     nats_tls_cert_file=pki.client_cert, nats_tls_key_file=pki.client_key), "nk",
        )  # fmt: skip


async def test_nats_token_with_server_tls(pki):
    token = "tok-" + uuid.uuid4().hex
    srv = start_secure_nats(
        nats_tls_block(pki, verify_clients=False) + f'\nauthorization {{ token: "{token}" }}'
    )
    try:
        await _roundtrip(await connect_nats(
            settings(srv.url, nats_token=token, nats_tls_ca_file=pki.ca), "tok"
        ))  # fmt: skip
        with pytest.raises(BusAuthError, match="refused the credentials") as e:
            await connect_nats(settings(srv.url, nats_token="nope", nats_tls_ca_file=pki.ca), "t")
        assert "HEADROOM_NATS_TOKEN" in str(e.value)
    finally:
        srv.stop()


async def test_nats_credentials_file(tmp_path):
    op = operator_setup(tmp_path)
    srv = start_secure_nats(op.server_config(), tls=False)
    try:
        nc = await connect_nats(settings(srv.url, nats_creds_file=op.creds_file), "creds")
        names = Names(f"hrsec-{uuid.uuid4().hex[:8]}")
        await ensure_samples_stream(nc.jetstream(), names)  # JetStream in the user's account
        await nc.jetstream().publish(names.samples("p"), b"{}")
        await _roundtrip(nc)
        with pytest.raises(BusAuthError, match="refused the credentials"):
            await connect_nats(settings(srv.url), "no-creds")
    finally:
        srv.stop()


async def test_redis_acl_user_and_mutual_tls(secure_redis, pki):
    tls = {"redis_tls_ca_file": pki.ca, "redis_tls_cert_file": pki.client_cert,
           "redis_tls_key_file": pki.client_key}  # fmt: skip
    url = secure_redis.url.replace("rediss://", "redis://")  # TLS turned on by the CA setting
    good = CommonSettings(redis_url=url, redis_username="headroom",
                          redis_password=REDIS_PASSWORD, **tls)  # fmt: skip
    r = connect_redis(good)
    try:
        assert await check_redis(r, url, "t")
        await r.set("sec:probe", b"1")
        assert await r.get("sec:probe") == b"1"
    finally:
        await r.aclose()
    for s, match in (
        (CommonSettings(redis_url=url, **tls), "refused the credentials"),
        (CommonSettings(redis_url=url, redis_username="headroom", redis_password="x", **tls),
         "refused the credentials"),
        (CommonSettings(redis_url=url, redis_username="headroom", redis_password=REDIS_PASSWORD,
                        **{**tls, "redis_tls_ca_file": pki.other_ca}), "TLS"),
    ):  # fmt: skip
        r = connect_redis(s)
        try:
            with pytest.raises(BusAuthError, match=match) as e:
                await check_redis(r, s.redis_url, "t")
            assert REDIS_PASSWORD not in str(e.value)
        finally:
            await r.aclose()


def test_redact_url():
    assert redact_url("nats://u:p4ss@h:4222") == "nats://u:***@h:4222"
    assert redact_url("redis://:p4ss@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("nats://s3cr3ttoken@h:4222") == "nats://***@h:4222"
    assert redact_url("nats://h:4222") == "nats://h:4222"
    s = CommonSettings(nats_password="hunter2", redis_password="hunter3", nats_token="hunter4")
    assert not any(x in repr(s) + str(s.model_dump()) for x in ("hunter2", "hunter3", "hunter4"))


# --- every service, as real processes ------------------------------------------------------
def service_env(pki: Pki, predictor_seed: str) -> dict[str, dict[str, str]]:
    """Per-service credentials as an operator would hand them out (Secrets -> env)."""
    redis = {"HEADROOM_REDIS_USERNAME": "headroom", "HEADROOM_REDIS_PASSWORD": REDIS_PASSWORD}
    return {
        "*": tls_env(pki),
        "gateway": {"HEADROOM_NATS_USER": "gateway", "HEADROOM_NATS_PASSWORD": GW_PASSWORD},
        "collector": {
            "HEADROOM_NATS_USER": "collector",
            "HEADROOM_NATS_PASSWORD": COLLECTOR_PASSWORD,
        },
        "trainer": {
            "HEADROOM_NATS_USER": "trainer",
            "HEADROOM_NATS_PASSWORD": TRAINER_PASSWORD,
            **redis,
        },
        "predictor": {"HEADROOM_NATS_NKEY_SEED_FILE": predictor_seed, **redis},
    }


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_every_service_connects_with_credentials_from_settings(
    secure_nats, secure_redis, pki, predictor_nkey
):
    names = Names(f"hrsec-{uuid.uuid4().hex[:8]}")
    bus = CommonSettings(redis_url=secure_redis.url, redis_username="headroom",
                         redis_password=REDIS_PASSWORD, redis_tls_ca_file=pki.ca,
                         redis_tls_cert_file=pki.client_cert,
                         redis_tls_key_file=pki.client_key)  # fmt: skip
    asyncio.run(publish_synthetic_model(bus, names))  # a model in the secured Redis
    env = service_env(pki, predictor_nkey[0])
    env["trainer"].update({"HEADROOM_TRAINER_MIN_SAMPLES": "1000000"})
    # llmd-predicted reads the predictions on every request (headroom does not ask for them)
    env["gateway"].update(
        {
            "HEADROOM_GATEWAY_PREDICT_TIMEOUT_MS": "1000",
            "HEADROOM_GATEWAY_PROFILE": "llmd-predicted",
        }
    )
    logs: list[str] = []
    stack = Stack(
        StackConfig(nats_url=secure_nats.url, redis_url=secure_redis.url,
                    namespace=names.namespace, gateway_port=embedded.free_port(), pods=1,
                    predictors=1, env=env, restart=False),
        log=logs.append,
    )  # fmt: skip
    try:
        stack.start()  # every service healthy: each connected with its credentials
        body = json.dumps({"model": DEFAULT_MODEL, "prompt": "hi", "max_tokens": 3}).encode()
        for _ in range(3):
            req = urllib.request.Request(stack.gateway_url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
                # the predictor (nkey, TLS) answered with the model it read from Redis (ACL, TLS)
                assert r.headers["x-headroom-routing"] == "predicted", dict(r.headers)
                assert r.headers["x-headroom-model-version"] == "v1"
        deadline = time.monotonic() + 30
        while True:  # gateway -> JetStream -> trainer (password, TLS) -> window
            m = _get(stack.admin_urls["trainer"] + "/metrics")
            if metric_value(m, "headroom_trainer_samples_received_total") >= 3:
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.2)
        health = json.loads(_get(stack.admin_urls["predictor-0"] + "/health"))
        assert health["model_version"] == "v1"
    finally:
        stack.stop()
    text = "\n".join(logs)
    for secret in (GW_PASSWORD, COLLECTOR_PASSWORD, TRAINER_PASSWORD, REDIS_PASSWORD):
        assert secret not in text


@pytest.mark.parametrize(
    ("service", "extra", "hint"),
    [
        ("gateway", {}, "HEADROOM_NATS_USER"),
        ("collector", {"HEADROOM_COLLECTOR_PODS": "pod-0=http://127.0.0.1:9"},
         "HEADROOM_NATS_USER"),
        ("predictor", {}, "HEADROOM_REDIS_USERNAME"),  # Redis first; then NATS (trainer)
        ("trainer", {"HEADROOM_REDIS_USERNAME": "headroom",
                     "HEADROOM_REDIS_PASSWORD": REDIS_PASSWORD}, "HEADROOM_NATS_USER"),
        ("gateway", {"HEADROOM_NATS_USER": "gateway", "HEADROOM_NATS_PASSWORD": GW_PASSWORD,
                     "HEADROOM_NATS_TLS_CA_FILE": "OTHER_CA"}, "HEADROOM_NATS_TLS_CA_FILE"),
    ],
)  # fmt: skip
def test_each_service_fails_clearly_without_credentials(
    secure_nats, secure_redis, pki, service, extra, hint
):
    import subprocess

    extra = {k: (pki.other_ca if v == "OTHER_CA" else v) for k, v in extra.items()}
    prefix = {"gateway": "GATEWAY", "collector": "COLLECTOR", "predictor": "PREDICTOR",
              "trainer": "TRAINER"}[service]  # fmt: skip
    env = {
        **os.environ, **tls_env(pki), "PYTHONUNBUFFERED": "1",
        "HEADROOM_NATS_URL": secure_nats.url, "HEADROOM_REDIS_URL": secure_redis.url,
        "HEADROOM_NAMESPACE": f"hrsec-{uuid.uuid4().hex[:8]}",
        f"HEADROOM_{prefix}_ADMIN_PORT": "0", "HEADROOM_GATEWAY_PORT": "0", **extra,
    }  # fmt: skip
    for k in ("HEADROOM_NATS_USER", "HEADROOM_NATS_PASSWORD", "HEADROOM_REDIS_USERNAME",
              "HEADROOM_REDIS_PASSWORD"):  # fmt: skip
        if k not in extra:
            env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", f"services.{service}"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert f"{service} cannot start" in out and hint in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert REDIS_PASSWORD not in out and GW_PASSWORD not in out
