"""Per-key request and token rate limits shared by every gateway replica through Redis.

The algorithm is GCRA (the generic cell rate algorithm, a token bucket kept as one
timestamp): each limit has an emission interval ``T = 60 s / per_minute`` and a tolerance
``tau = burst * T``; its Redis key holds the theoretical arrival time ``TAT``. A request of
cost ``c`` at time ``now`` is allowed when ``max(TAT, now) + c*T - tau <= now``, which moves
``TAT`` there; otherwise it is refused and may retry after the difference. A client may spend
``burst`` at once, and ``per_minute`` per minute after that (so the most any 60 s window
can see is ``burst + per_minute``).

Both limits of a key (requests and tokens) are checked and charged by one Lua script, in one
round trip, atomically: either both are charged or neither. Time is Redis's own ``TIME``,
so replicas with skewed clocks share one timeline. Keys are
``{namespace}:ratelimit:{key id}:{requests|tokens}``, each with a TTL of exactly the time
until its bucket is full again (an absent key is a full bucket), so idle keys vanish.

Tokens: at admission a request is charged its prompt tokens (and refused if they do not
fit); when it completes (or fails, or the client leaves) its output tokens are owed
(:meth:`RedisLimiter.settle`) and charged without a check: by the key's next request, in
the same script call as its own check (no extra round trip for a busy key), or within
``FLUSH_S`` by one call for every key still owing. The bucket may go into debt, and the
key's next requests wait until it has paid it back. A key can therefore overshoot its token
limit by the output of the requests it has in flight, never for longer than that debt
takes to repay. A request whose prompt alone exceeds the token burst can never be served
under the key's limit: 429 ``request_too_large`` without Retry-After.

When Redis is unreachable or slow (``ratelimit_timeout_ms``), the setting
``ratelimit_on_redis_error`` decides: ``allow`` (fail open: the request is served unlimited,
the default, since an outage of the limiter should not become an outage of the API) or
``reject`` (fail closed: 503 ``rate_limiter_unavailable``). Either way the failure is counted
in ``headroom_gateway_ratelimit_redis_errors_total{action}``, logged (at most one line per
``LOG_EVERY_S``), and Redis is not asked again for ``ratelimit_retry_s``, so an outage adds no
per-request timeouts.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.gateway.api_keys import ApiKey, RateLimit
from services.gateway.errors import GatewayError
from shared.subjects import Names

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0
FLUSH_S = 0.1  # output tokens not carried by a next request are charged within this
MAX_DEBTORS = 100_000  # keys owing tokens kept through a Redis outage (then dropped, counted)
OnError = Literal["allow", "reject"]

# KEYS[i]: a limit's TAT key; ARGV[4i-3..4i]: interval_us, tolerance_us, cost, debt of limit
# i. The debt (output tokens of finished requests, not yet charged) is charged first,
# whatever the verdict; the cost only if every limit admits it.
# Returns {refused limit index (0: none), wait us, remaining of each limit...}.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local refused, wait = 0, 0
local bases, news, left = {}, {}, {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[4 * i - 3])
  local tolerance = tonumber(ARGV[4 * i - 2])
  local cost = tonumber(ARGV[4 * i - 1])
  local debt = tonumber(ARGV[4 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  local base = tat + debt * interval
  local new = base + cost * interval
  local over = new - tolerance - now
  if over > 0 then
    if refused == 0 then refused = i end
    if over > wait then wait = over end
    left[i] = math.floor((now + tolerance - base) / interval)
  else
    left[i] = math.floor((now + tolerance - new) / interval)
  end
  bases[i], news[i] = base, new
end
for i = 1, #KEYS do
  local tat = news[i]
  if refused ~= 0 then tat = bases[i] end
  if tat > now then
    redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
  end
end
local out = {refused, math.ceil(wait)}
for i = 1, #KEYS do out[#out + 1] = left[i] end
return out
"""

# KEYS[i]: a token TAT key; ARGV[2i-1..2i]: interval_us, debt. Charged without a check.
SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  tat = tat + tonumber(ARGV[2 * i]) * tonumber(ARGV[2 * i - 1])
  redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
end
return #KEYS
"""


@dataclass(frozen=True, slots=True)
class Charge:
    """One limit of a key and what this request costs against it."""

    kind: Literal["requests", "tokens"]
    limit: RateLimit
    cost: int


def charges(key: ApiKey, prompt_tokens: int | None) -> list[Charge]:
    """What a request costs under ``key``'s limits (its prompt tokens, when it has a token
    limit: the caller counts them only then)."""
    p = key.policy
    out = []
    if p.requests is not None:
        out.append(Charge("requests", p.requests, 1))
    if p.tokens is not None:
        out.append(Charge("tokens", p.tokens, prompt_tokens or 0))
    return out


def retry_after_s(wait_us: int) -> int:
    """Retry-After (whole seconds, rounded up, at least 1) for a wait in microseconds."""
    return max(1, math.ceil(wait_us / 1e6))


def too_large(c: Charge) -> GatewayError:
    return GatewayError(
        429,
        f"Request too large for this API key's {c.kind} per minute limit: limit "
        f"{c.limit.per_minute}, burst {c.limit.burst}, requested {c.cost}. "
        "Send fewer tokens per request or ask for a larger limit.",
        type=c.kind, code="request_too_large",
    )  # fmt: skip


def rate_limited(c: Charge, wait_us: int, remaining: dict[str, int]) -> GatewayError:
    """429 as OpenAI answers it (type ``requests`` or ``tokens``), with Retry-After and the
    ``x-ratelimit-*`` headers of the refused limit."""
    after = retry_after_s(wait_us)
    unit = "RPM" if c.kind == "requests" else "TPM"
    return GatewayError(
        429,
        f"Rate limit reached for this API key on {c.kind} per min ({unit}): limit "
        f"{c.limit.per_minute}, requested {c.cost}. Please try again in {wait_us / 1e6:.3g}s.",
        type=c.kind, code="rate_limit_exceeded",
        headers={
            "Retry-After": str(after),
            f"x-ratelimit-limit-{c.kind}": str(c.limit.per_minute),
            f"x-ratelimit-remaining-{c.kind}": str(max(0, remaining.get(c.kind, 0))),
            f"x-ratelimit-reset-{c.kind}": f"{wait_us / 1e6:.3f}s",
        },
    )  # fmt: skip


class RedisLimiter:
    """The shared limiter (one per gateway). ``acquire`` raises GatewayError 429 (or 503
    when Redis fails and the mode is ``reject``); ``settle`` charges output tokens in the
    background."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        registry: CollectorRegistry,
        *,
        on_error: OnError = "allow",
        retry_s: float = 1.0,
    ) -> None:
        self.redis = redis
        self.names = names
        self.on_error = on_error
        self.retry_s = retry_s
        self._acquire = redis.register_script(ACQUIRE)
        self._settle = redis.register_script(SETTLE)
        self._down_until = 0.0  # monotonic: Redis failed; don't ask before this
        self._logged_at = -math.inf
        self._debts: dict[str, tuple[RateLimit, int]] = {}  # key id -> uncharged output tokens
        self._flusher: asyncio.Future | None = None
        self._closed = False
        self.limited = Counter(
            "headroom_gateway_rate_limited",
            "Requests refused with 429 by a key's rate limit, by key id and limit",
            ["key", "limit"], registry=registry,
        )  # fmt: skip
        self.redis_errors = Counter(
            "headroom_gateway_ratelimit_redis_errors",
            "Rate-limit checks Redis did not answer (or skipped while Redis is paused after a "
            "failure), by what the gateway did: allowed (fail open) or rejected (503)",
            ["action"], registry=registry,
        )  # fmt: skip
        self.debts_dropped = Counter(
            "headroom_gateway_ratelimit_debts_dropped",
            "Output-token charges dropped because Redis stayed unreachable while too many "
            "keys owed tokens (those keys were not charged them)",
            registry=registry,
        )  # fmt: skip

    def key(self, key_id: str, kind: str) -> str:
        return f"{self.names.redis_prefix}ratelimit:{key_id}:{kind}"

    async def acquire(self, key: ApiKey, cs: list[Charge]) -> None:
        for c in cs:
            if c.cost > c.limit.burst:
                self.limited.labels(key.id, c.kind).inc()
                raise too_large(c)
        if not cs:
            return
        if time.monotonic() < self._down_until:
            self._redis_failed(None)
            return
        debt = self._debts.pop(key.id, None)  # this key's uncharged output tokens ride along
        args: list[float | int] = []
        for c in cs:
            owed = debt[1] if debt is not None and c.kind == "tokens" else 0
            args += [c.limit.interval_us, c.limit.tolerance_us, c.cost, owed]
        try:
            reply = await self._acquire(keys=[self.key(key.id, c.kind) for c in cs], args=args)
        except (RedisError, OSError, TimeoutError) as e:
            if debt is not None:
                self._owe(key.id, *debt)  # still owed: the flusher retries it
            self._redis_failed(e)
            return
        refused, wait_us, *left = (int(x) for x in reply)
        if refused:
            c = cs[refused - 1]
            self.limited.labels(key.id, c.kind).inc()
            remaining = {c.kind: n for c, n in zip(cs, left, strict=True)}
            raise rate_limited(c, wait_us, remaining)

    def _redis_failed(self, err: Exception | None) -> None:
        self.redis_errors.labels("rejected" if self.on_error == "reject" else "allowed").inc()
        if err is not None:
            self._down_until = time.monotonic() + self.retry_s
            now = time.monotonic()
            if now - self._logged_at >= LOG_EVERY_S:
                self._logged_at = now
                log.warning("rate limiter: Redis failed (%s: %s); requests are %s without a "
                            "limit check for %.1f s", type(err).__name__, err,
                            "refused" if self.on_error == "reject" else "served",
                            self.retry_s)  # fmt: skip
        if self.on_error == "reject":
            raise GatewayError(
                503, "the rate limiter is unavailable; retry later",
                type="service_unavailable", code="rate_limiter_unavailable",
                headers={"Retry-After": str(max(1, math.ceil(self.retry_s)))},
            )  # fmt: skip

    def settle(self, key: ApiKey, output_tokens: int) -> None:
        """Charge ``output_tokens`` to the key's token limit, without a check: carried by the
        key's next :meth:`acquire` if one comes within ``FLUSH_S``, else by the flusher
        (one Redis call for every key owing tokens)."""
        lim = key.policy.tokens
        if lim is None or output_tokens <= 0:
            return
        self._owe(key.id, lim, output_tokens)

    def _owe(self, key_id: str, lim: RateLimit, tokens: int) -> None:
        prev = self._debts.get(key_id)
        self._debts[key_id] = (lim, tokens + (prev[1] if prev is not None else 0))
        if not self._closed and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        while self._debts:
            await asyncio.sleep(FLUSH_S)
            await self.flush()

    async def flush(self) -> None:
        """Charge every pending debt now, in one Redis call."""
        if not self._debts:
            return
        if time.monotonic() < self._down_until:  # Redis failed a moment ago: keep them
            return
        debts, self._debts = self._debts, {}
        keys = [self.key(kid, "tokens") for kid in debts]
        args = [x for lim, tokens in debts.values() for x in (lim.interval_us, tokens)]
        try:
            await self._settle(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as e:
            self._down_until = time.monotonic() + self.retry_s
            for kid, (lim, tokens) in debts.items():
                if len(self._debts) < MAX_DEBTORS:
                    self._owe(kid, lim, tokens)
                else:
                    self.debts_dropped.inc()
            log.debug("rate limiter: output tokens not charged yet: %s", e)

    async def close(self) -> None:
        """Charge what is owed (bounded by the Redis timeout), then disconnect."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
        self._down_until = 0.0
        try:
            await self.flush()
        finally:
            await self.redis.aclose()
