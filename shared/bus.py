"""NATS, JetStream and Redis connection helpers shared by every service.

Every service connects through :func:`connect_nats` and :func:`connect_redis`, given its
settings (shared/settings.py): URLs plus the bus security settings, i.e. NATS user/password,
token, nkey seed file or credentials file, TLS with a CA and a client certificate; Redis
ACL user/password and TLS. Credentials are never logged: URLs in log lines and errors go
through :func:`redact_url`, secrets are pydantic ``SecretStr``. A connection refused for its
credentials (or its TLS) fails with :class:`BusAuthError`, whose message says which
settings to set, instead of retrying forever.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
import nats.errors
import redis.asyncio as aioredis
import redis.exceptions
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from shared.settings import CommonSettings
from shared.subjects import Names

log = logging.getLogger(__name__)

NATS_AUTH_HINT = (
    "set HEADROOM_NATS_USER and HEADROOM_NATS_PASSWORD, HEADROOM_NATS_TOKEN, "
    "HEADROOM_NATS_NKEY_SEED_FILE or HEADROOM_NATS_CREDS_FILE"
)
NATS_TLS_HINT = "set HEADROOM_NATS_TLS_CA_FILE (and HEADROOM_NATS_TLS_CERT_FILE/_KEY_FILE)"
REDIS_AUTH_HINT = "set HEADROOM_REDIS_USERNAME and HEADROOM_REDIS_PASSWORD"
REDIS_TLS_HINT = (
    "use a rediss:// URL or set HEADROOM_REDIS_TLS_CA_FILE "
    "(and HEADROOM_REDIS_TLS_CERT_FILE/_KEY_FILE)"
)


class BusAuthError(RuntimeError):
    """NATS or Redis refused this service's credentials or TLS (retrying will not help)."""


def redact_url(url: str) -> str:
    """``url`` without its password (``nats://user:***@host:4222``) for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    cred = f"{user}:***" if parts.password is not None else "***"  # a token alone: hidden
    return urlunsplit((parts.scheme, f"{cred}@{host}", parts.path, parts.query, parts.fragment))


def _tls_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca or None)
    if cert:
        ctx.load_cert_chain(cert, key or None)
    return ctx


def nats_options(settings: CommonSettings) -> dict[str, Any]:
    """nats-py ``connect`` keyword arguments for the settings' credentials and TLS."""
    s = settings
    opts: dict[str, Any] = {}
    if s.nats_user:
        opts["user"] = s.nats_user
        opts["password"] = s.nats_password.get_secret_value()
    if s.nats_token.get_secret_value():
        opts["token"] = s.nats_token.get_secret_value()
    if s.nats_nkey_seed_file:
        opts["nkeys_seed"] = s.nats_nkey_seed_file
    if s.nats_creds_file:
        opts["user_credentials"] = s.nats_creds_file
    if s.nats_tls_ca_file or s.nats_tls_cert_file:
        opts["tls"] = _tls_context(s.nats_tls_ca_file, s.nats_tls_cert_file, s.nats_tls_key_file)
    if s.nats_tls_hostname:
        opts["tls_hostname"] = s.nats_tls_hostname
    return opts


def _nats_refusal(e: BaseException) -> str | None:
    """Why NATS refused the connection for good (credentials or TLS), or None."""
    text = str(e).lower()
    if any(w in text for w in ("authorization violation", "authentication", "revoked")):
        return f"NATS refused the credentials ({e}): {NATS_AUTH_HINT}"
    if isinstance(e, ssl.SSLError) or "tls" in text or "certificate" in text:
        return f"TLS to NATS failed ({type(e).__name__}: {e}): {NATS_TLS_HINT}"
    return None


async def connect_nats(
    target: str | CommonSettings,
    name: str,
    *,
    connect_timeout: float = 2.0,
    on_disconnected: Callable[[], None] | None = None,
    on_reconnected: Callable[[], None] | None = None,
) -> NATS:
    """Connect to ``target`` (a URL, or a service's settings: URL, credentials and TLS) with
    unlimited reconnects; errors and reconnects are logged, not raised. A refusal of the
    credentials or of TLS raises :class:`BusAuthError` (it would never succeed); an
    unreachable server is waited for. ``on_disconnected``/``on_reconnected`` are called
    (synchronously) as the connection is lost and back."""
    if isinstance(target, CommonSettings):
        url, options = target.nats_url, nats_options(target)
    else:
        url, options = target, {}
    refused: list[str] = []

    async def _error(e: Exception) -> None:
        why = _nats_refusal(e)
        if why is not None and not nc.is_connected:
            refused.append(why)
        log.warning("nats error (%s): %s", name, e)

    nc: NATS

    async def _disconnected() -> None:
        closing = nc.is_closed or nc.is_draining
        log.log(logging.INFO if closing else logging.WARNING, "nats disconnected (%s)", name)
        if on_disconnected is not None:
            on_disconnected()

    async def _reconnected() -> None:
        log.info("nats reconnected (%s)", name)
        if on_reconnected is not None:
            on_reconnected()

    nc = NATS()
    connecting = asyncio.ensure_future(
        nc.connect(
            url,
            name=name,
            connect_timeout=connect_timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_error,
            disconnected_cb=_disconnected,
            reconnected_cb=_reconnected,
            **options,
        )
    )
    try:
        while not connecting.done():  # a refusal is final: stop the retry loop, say why
            await asyncio.wait({connecting}, timeout=0.05)
            if refused and not connecting.done():
                connecting.cancel()
                await asyncio.gather(connecting, return_exceptions=True)
                await nc.close()
                raise BusAuthError(f"{name}: {redact_url(url)}: {refused[0]}")
        connecting.result()
    except (nats.errors.Error, OSError, ssl.SSLError) as e:
        why = _nats_refusal(e) or f"{type(e).__name__}: {e}"
        raise BusAuthError(f"{name}: cannot connect to NATS at {redact_url(url)}: {why}") from e
    finally:
        if not connecting.done():
            connecting.cancel()
    return nc


async def ensure_samples_stream(
    js: JetStreamContext, names: Names, *, max_age_s: float = 24 * 3600, max_msgs: int = 1_000_000
) -> None:
    """Create (or leave in place) the JetStream stream that carries training samples.

    ``duplicate_window`` makes the publisher's ``Nats-Msg-Id`` (the request id) de-duplicate
    retried publications.
    """
    config = StreamConfig(
        name=names.samples_stream,
        subjects=[names.samples_wildcard],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=max_age_s,
        max_msgs=max_msgs,
        duplicate_window=120.0,
    )
    try:
        await js.stream_info(names.samples_stream)
    except NotFoundError:
        await js.add_stream(config)
        log.info("created JetStream stream %s", names.samples_stream)


async def verify_nats(settings: CommonSettings, name: str) -> None:
    """Connect once and close: raises :class:`BusAuthError` if NATS refuses the settings'
    credentials or TLS (waits for an unreachable server, like :func:`connect_nats`)."""
    nc = await connect_nats(settings, name)
    await nc.close()


def redis_options(settings: CommonSettings) -> tuple[str, dict[str, Any]]:
    """The Redis URL (``rediss://`` when TLS is configured) and redis-py keyword arguments
    for the settings' ACL credentials and TLS."""
    s = settings
    url = s.redis_url
    opts: dict[str, Any] = {}
    if s.redis_username:
        opts["username"] = s.redis_username
    if s.redis_password.get_secret_value():
        opts["password"] = s.redis_password.get_secret_value()
    if s.redis_tls_ca_file or s.redis_tls_cert_file:
        if url.startswith("redis://"):
            url = "rediss://" + url[len("redis://") :]
        if s.redis_tls_ca_file:
            opts["ssl_ca_certs"] = s.redis_tls_ca_file
        if s.redis_tls_cert_file:
            opts["ssl_certfile"] = s.redis_tls_cert_file
            opts["ssl_keyfile"] = s.redis_tls_key_file or None
    return url, opts


REDIS_CONNECT_TIMEOUT_S = 2.0


def connect_redis(target: str | CommonSettings) -> aioredis.Redis:
    """An asyncio Redis client returning bytes (model blobs are binary), for ``target`` (a
    URL, or a service's settings: URL, ACL credentials, TLS and ``redis_timeout_s``).
    Connects lazily: call :func:`check_redis` to find out at start whether the credentials
    are accepted. Every command fails after ``redis_timeout_s`` without a reply (redis-py
    waits forever by default: a Redis that stops answering on an open connection hung the
    predictor's model load, and its load lock with it)."""
    if isinstance(target, CommonSettings):
        url, options = redis_options(target)
        timeout = target.redis_timeout_s
    else:
        url, options = target, {}
        timeout = CommonSettings.model_fields["redis_timeout_s"].default
    return aioredis.from_url(
        url,
        decode_responses=False,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        socket_timeout=timeout,
        **options,
    )


async def check_redis(r: aioredis.Redis, url: str, name: str) -> bool:
    """PING ``r``: True if it answers, False if Redis is unreachable now (services keep
    going and retry); raises :class:`BusAuthError` when Redis refuses the credentials or
    the TLS handshake fails, which retrying would not change."""
    try:
        await r.ping()
        return True
    except redis.exceptions.AuthenticationError as e:
        raise BusAuthError(
            f"{name}: Redis at {redact_url(url)} refused the credentials ({e}): {REDIS_AUTH_HINT}"
        ) from e
    except redis.exceptions.ResponseError as e:
        if any(w in str(e) for w in ("NOAUTH", "WRONGPASS", "NOPERM")):
            raise BusAuthError(
                f"{name}: Redis at {redact_url(url)} refused the credentials ({e}): "
                f"{REDIS_AUTH_HINT}"
            ) from e
        raise
    except redis.exceptions.ConnectionError as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, ssl.SSLError) or "SSL" in str(e) or "certificate" in str(e):
            raise BusAuthError(
                f"{name}: TLS to Redis at {redact_url(url)} failed ({e}): {REDIS_TLS_HINT}"
            ) from e
        log.warning("%s: Redis at %s unreachable: %s", name, redact_url(url), e)
        return False
