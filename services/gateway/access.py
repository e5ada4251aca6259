"""The gateway's front door: who the caller is, what it may do, and what the pods are told.

:class:`FrontDoor` (one per gateway) holds the loaded API keys (re-read when the key file
changes: :mod:`shared.watched_file`), the privileged-header policy, the shared rate limiter
and the pod credentials. Per request it makes a :class:`Caller`, which travels with the
request through the proxy:

1. ``front.caller(headers)``: 401 without a valid key (key file configured), the request's
   scheduling objectives under the caller's header policy (400/403), and the debug flag;
2. ``await caller.admit(parsed)``: 404 for a model the key may not use, 429 from its rate
   limits (prompt tokens are counted here, only for keys with a token limit);
3. ``caller.pod_authorization``: the ``Authorization`` value for the pod request;
4. ``caller.settled(output_tokens)``: charges the output tokens to the key's token limit.

Without a key file every request gets the same anonymous caller policy and steps 2 and 4
do nothing: the hot path of a gateway without keys is a few attribute reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from services.gateway.api_keys import ApiKey, KeyFileError, parse_key_file
from services.gateway.auth import (
    ALLOW_ALL,
    HeaderPolicy,
    KeyRing,
    authenticate,
    bearer_token,
    global_policy,
    model_not_found,
    objectives_for,
)
from services.gateway.errors import GatewayError
from services.gateway.explain import wants_debug
from services.gateway.openai_request import ParsedRequest
from services.gateway.pod_auth import PodCredentials
from services.gateway.ratelimit import RedisLimiter, charges
from services.gateway.request_headers import RequestObjectives, parse_objective_headers
from services.gateway.settings import GatewaySettings
from shared.subjects import Names
from shared.watched_file import WatchedFile

log = logging.getLogger(__name__)


class Caller:
    """One request's caller: its key (None without a key file), objectives, debug flag and
    the credential for its pod request."""

    __slots__ = ("_front", "debug", "key", "objectives", "pod_authorization")

    def __init__(
        self,
        front: FrontDoor,
        key: ApiKey | None,
        objectives: RequestObjectives,
        debug: bool,
        pod_authorization: str | None,
    ) -> None:
        self._front = front
        self.key = key
        self.objectives = objectives
        self.debug = debug
        self.pod_authorization = pod_authorization

    async def admit(self, req: ParsedRequest) -> None:
        """Raises GatewayError 404 (model not allowed) or 429 (rate limited)."""
        key = self.key
        if key is None:
            return
        if not key.policy.allows_model(req.model):
            self._front.denied.labels("model").inc()
            raise model_not_found(req.model)
        limiter = self._front.limiter
        if limiter is None or (key.policy.requests is None and key.policy.tokens is None):
            return
        tokens = None
        if key.policy.tokens is not None:
            tokens = len((await self._front.tokens(req))[0])
        await limiter.acquire(key, charges(key, tokens))

    def settled(self, output_tokens: int) -> None:
        """The request is over (served, failed or abandoned) with ``output_tokens`` made."""
        key = self.key
        if key is not None and key.policy.tokens is not None and self._front.limiter:
            self._front.limiter.settle(key, output_tokens)


class FrontDoor:
    def __init__(
        self,
        settings: GatewaySettings,
        names: Names,
        registry: CollectorRegistry,
        profiles: Collection[str],
        tokens: Callable[[ParsedRequest], Awaitable[tuple[list[int], int]]],
    ) -> None:
        s = self.settings = settings
        self.tokens = tokens  # the request's prompt tokens, tokenized once (Gateway.prompt_tokens)
        self.names = names
        self.registry = registry
        self.profiles = profiles
        self.active_profile = settings.profile
        self.pods = PodCredentials(
            settings.pod_auth, settings.pod_api_key.get_secret_value(), settings.pod_api_key_file
        )
        self.anonymous = global_policy(settings.privileged_headers)
        self._file = WatchedFile(s.api_keys_path) if s.api_keys_path else None
        self.ring: KeyRing | None = None
        self.policies: dict[str, HeaderPolicy] = {}
        self.limiter: RedisLimiter | None = None
        self._watch: asyncio.Task | None = None
        self.auth_failures = Counter(
            "headroom_gateway_auth_failures",
            "Requests refused with 401, by reason (missing or invalid key)",
            ["reason"], registry=registry,
        )  # fmt: skip
        self.denied = Counter(
            "headroom_gateway_policy_denied",
            "Requests refused by their key's policy, by what was denied "
            "(model: 404; profile, priority, debug: 403)",
            ["what"], registry=registry,
        )  # fmt: skip
        self.keys_loaded = Gauge(
            "headroom_gateway_api_keys", "API keys loaded from the key file", registry=registry
        )
        self.reloads = Counter(
            "headroom_gateway_api_key_reloads",
            "Key file (re)loads, by result (ok, or error: the previous keys stay in force)",
            ["result"], registry=registry,
        )  # fmt: skip
        # read at construction, so a bad file fails start-up before anything listens
        self.pods.load()
        if self._file is not None:
            self._file.check()
            self._install(self._load())

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Start watching the key files; make the rate limiter (it connects to Redis at
        the first limited request)."""
        if self._file is not None:
            self.limiter = self._make_limiter()
        if self._file is not None or self.pods.watches_file:
            self._watch = asyncio.create_task(self._watch_files(), name="front-door-watch")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            try:
                await self._watch
            except asyncio.CancelledError:
                pass
            self._watch = None
        if self.limiter is not None:
            await self.limiter.close()
            self.limiter = None

    def _make_limiter(self) -> RedisLimiter:
        from redis.asyncio import Redis

        s = self.settings
        timeout = s.ratelimit_timeout_ms / 1000
        redis = Redis.from_url(s.redis_url, socket_timeout=timeout,
                               socket_connect_timeout=timeout)  # fmt: skip
        return RedisLimiter(redis, self.names, self.registry, on_error=s.ratelimit_on_redis_error,
                            retry_s=s.ratelimit_retry_s)  # fmt: skip

    def _load(self) -> list[ApiKey]:
        assert self._file is not None
        try:
            text = self._file.read()
        except (OSError, UnicodeDecodeError) as e:
            raise KeyFileError(f"{self._file.path}: unreadable: {e}") from None
        return parse_key_file(text, str(self._file.path))

    def _install(self, keys: list[ApiKey]) -> None:
        self.ring = KeyRing(keys)
        self.policies = {k.id: HeaderPolicy.for_key(k.policy) for k in keys}
        self.keys_loaded.set(len(keys))
        self.reloads.labels("ok").inc()
        log.info("API keys loaded: %d from %s", len(keys), self.settings.api_keys_path)

    async def _watch_files(self) -> None:
        interval = self.settings.api_keys_reload_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self._reload_changed()
            except Exception:  # never let the watch die: the next change is retried
                self.reloads.labels("error").inc()
                log.exception("credential files not reloaded")

    async def _reload_changed(self) -> None:
        self.pods.reload_if_changed()
        if self._file is None or not self._file.check():
            return
        try:
            keys = await asyncio.to_thread(self._load)  # a big file parses off the loop
        except KeyFileError as e:
            self.reloads.labels("error").inc()
            log.error("API key file not reloaded, the previous keys stay in force: %s", e)
            return
        self._install(keys)

    # --- per request --------------------------------------------------------------------
    def identify(self, headers: Mapping[str, str]) -> ApiKey | None:
        """The caller's key (None without a key file); raises GatewayError 401."""
        if self.ring is None:
            return None
        try:
            return authenticate(self.ring, headers)
        except GatewayError:
            reason = "missing" if bearer_token(headers) is None else "invalid"
            self.auth_failures.labels(reason).inc()
            raise

    def caller(self, headers: Mapping[str, str]) -> Caller:
        """Raises GatewayError 401 (no valid key), 400 (a malformed scheduling header) or
        403 (a privileged header beyond the caller's policy)."""
        key = None
        policy = self.anonymous
        if self.ring is not None:
            key = self.identify(headers)
            policy = self.policies[key.id]
        if policy is ALLOW_ALL:  # no key file, privileged_headers=allow: as before keys existed
            objectives, debug = (
                parse_objective_headers(headers, self.profiles),
                wants_debug(headers),
            )
        else:
            try:
                objectives, debug = objectives_for(headers, policy, self.profiles,
                                                   self.active_profile)  # fmt: skip
            except GatewayError as e:
                if e.status == 403 and e.param is not None:
                    self.denied.labels(e.param.removeprefix("x-headroom-")).inc()
                raise
        return Caller(self, key, objectives, debug, self.pods.authorization(headers))

    def models_for(self, headers: Mapping[str, str], models: list[str]) -> list[str]:
        """The models of ``/v1/models`` this caller may see; raises GatewayError 401."""
        key = self.identify(headers)
        if key is None:
            return models
        return [m for m in models if key.policy.allows_model(m)]
