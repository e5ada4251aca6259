"""Who may ask for what (pure): API-key verification and the privileged-header policy.

- :class:`KeyRing` verifies a presented key: the id inside the key finds its record (ids are
  public), then the key's SHA-256 is compared with the stored one in constant time
  (:func:`hmac.compare_digest`). Unknown ids and malformed keys are compared against a dummy
  digest, so every failure path does the same work.
- :class:`HeaderPolicy` decides what a caller may do with the privileged request headers:
  ``x-headroom-profile`` (a profile other than the gateway's active one), ``x-headroom-priority``
  and ``x-headroom-debug``. With a key file each key has its own policy; without one, the
  gateway setting ``privileged_headers`` picks ``allow`` (anyone may use them: the behaviour
  before keys existed), ``ignore`` (the headers are dropped unread) or ``reject`` (403).

Status codes, as OpenAI and its peers answer them:

- 401 ``invalid_api_key``: no ``Authorization: Bearer`` key, or not a valid one (with
  ``WWW-Authenticate: Bearer``, RFC 6750). The reply never echoes any part of the key.
- 404 ``model_not_found`` for a model the key may not use: OpenAI answers a model a key has
  no access to with "does not exist or you do not have access to it", so a key cannot
  probe which models exist. ``/v1/models`` lists only the key's models, consistently.
- 403 ``permission_denied`` (``param`` names the header) for a privileged header beyond the
  key's policy: the caller is authenticated but not permitted, which is what 403 means
  (RFC 9110) and what the ``openai`` client raises as ``PermissionDeniedError``. 400 would
  tell a client its request is malformed, which it is not.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from services.gateway.api_keys import ApiKey, KeyPolicy, key_digest, key_id_of
from services.gateway.errors import GatewayError
from services.gateway.explain import DEBUG_HEADER, wants_debug
from services.gateway.request_headers import (
    PRIORITY_HEADER,
    PROFILE_HEADER,
    RequestObjectives,
    parse_objective_headers,
)

PRIVILEGED_HEADERS = (PROFILE_HEADER, PRIORITY_HEADER, DEBUG_HEADER)
PrivilegedMode = Literal["allow", "ignore", "reject"]
_DUMMY = hashlib.sha256(b"headroom: no such key").digest()


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    raw = headers.get("authorization")
    if raw is None:
        return None
    scheme, _, token = raw.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class KeyRing:
    """The loaded keys, by id."""

    __slots__ = ("_by_id",)

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._by_id = {k.id: k for k in keys}

    def __len__(self) -> int:
        return len(self._by_id)

    def verify(self, presented: str) -> ApiKey | None:
        """The key record if ``presented`` is a valid key, else None."""
        digest = key_digest(presented)
        key_id = key_id_of(presented)
        rec = self._by_id.get(key_id) if key_id is not None else None
        ok = hmac.compare_digest(digest, rec.digest if rec is not None else _DUMMY)
        return rec if ok and rec is not None else None


def unauthorized(message: str) -> GatewayError:
    return GatewayError(
        401, message, type="invalid_request_error", code="invalid_api_key",
        headers={"WWW-Authenticate": 'Bearer realm="headroom"'},
    )  # fmt: skip


MISSING_KEY = (
    "You didn't provide an API key. Provide it in an Authorization header using Bearer auth "
    "(Authorization: Bearer YOUR_KEY)."
)
INVALID_KEY = "Incorrect API key provided."


def authenticate(ring: KeyRing, headers: Mapping[str, str]) -> ApiKey:
    """The caller's key; raises GatewayError(401)."""
    token = bearer_token(headers)
    if token is None:
        raise unauthorized(MISSING_KEY)
    key = ring.verify(token)
    if key is None:
        raise unauthorized(INVALID_KEY)
    return key


def forbidden(message: str, param: str) -> GatewayError:
    return GatewayError(403, message, type="invalid_request_error", code="permission_denied",
                        param=param)  # fmt: skip


def model_not_found(model: str) -> GatewayError:
    return GatewayError(
        404, f"The model '{model}' does not exist or you do not have access to it.",
        type="not_found_error", code="model_not_found", param="model",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class HeaderPolicy:
    """What a caller may do with the privileged headers. ``mode`` ``allow``: anything;
    ``ignore``: the headers are dropped; ``reject``: any use beyond ``profiles`` (besides
    the active profile), ``priority`` and ``debug`` is a 403."""

    mode: PrivilegedMode
    profiles: frozenset[str] = frozenset()
    priority: tuple[int, int] | None = None  # None: no priority header allowed
    debug: bool = False

    @classmethod
    def for_key(cls, p: KeyPolicy) -> HeaderPolicy:
        return cls("reject", p.profiles, p.priority, p.debug)


ALLOW_ALL = HeaderPolicy("allow")
IGNORE_ALL = HeaderPolicy("ignore")
REJECT_ALL = HeaderPolicy("reject")
_GLOBAL = {"allow": ALLOW_ALL, "ignore": IGNORE_ALL, "reject": REJECT_ALL}


def global_policy(mode: PrivilegedMode) -> HeaderPolicy:
    """The policy of every request when the gateway has no key file."""
    return _GLOBAL[mode]


def objectives_for(
    headers: Mapping[str, str],
    policy: HeaderPolicy,
    profiles: Collection[str],
    active_profile: str,
) -> tuple[RequestObjectives, bool]:
    """The request's scheduling objectives and whether it gets the debug headers, under
    ``policy``. Raises GatewayError 400 (a malformed header) or 403 (a header the policy
    does not allow; ``param`` names it)."""
    if policy.mode == "allow":
        return parse_objective_headers(headers, profiles), wants_debug(headers)
    if policy.mode == "ignore":
        if any(h in headers for h in PRIVILEGED_HEADERS):
            headers = {k: v for k, v in headers.items() if k not in PRIVILEGED_HEADERS}
        return parse_objective_headers(headers, profiles), False
    obj = parse_objective_headers(headers, profiles)
    if obj.profile is not None and obj.profile != active_profile:
        if obj.profile not in policy.profiles:
            raise forbidden(
                f"this API key may not choose the scheduling profile '{obj.profile}' "
                f"(header '{PROFILE_HEADER}')",
                PROFILE_HEADER,
            )
    if obj.priority is not None:
        rng = policy.priority
        if rng is None or not rng[0] <= obj.priority <= rng[1]:
            allowed = f"allowed: {rng[0]}..{rng[1]}" if rng is not None else "not allowed"
            raise forbidden(
                f"priority {obj.priority} is beyond this API key's policy ({allowed}; "
                f"header '{PRIORITY_HEADER}')",
                PRIORITY_HEADER,
            )
    debug = wants_debug(headers)
    if debug and not policy.debug:
        raise forbidden(
            f"this API key may not ask for the routing debug headers (header '{DEBUG_HEADER}')",
            DEBUG_HEADER,
        )
    return obj, debug
