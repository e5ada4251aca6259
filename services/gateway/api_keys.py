"""Client API keys: the key format, how a key is stored, and the key file (pure, no I/O).

A key is ``hr-<id>-<secret>``: ``id`` is 12 hex digits (48 random bits, public: it names the
key in the file, in ``headroom keys list``, in metrics and logs), ``secret`` is 43 URL-safe
base64 characters (256 random bits from :mod:`secrets`). The file stores only
``sha256(key)`` (hex of the whole key string), never the key.

Why a plain SHA-256 and not a password KDF (bcrypt, scrypt, Argon2): a KDF is slow on
purpose so that guessing a *low-entropy* password from its hash takes long. These keys are
256-bit random values, so a guess succeeds with probability 2^-256 however fast the hash is;
a slow KDF would add tens of milliseconds to every request and buy nothing. SHA-256 is
preimage resistant, so a leaked key file does not reveal a usable key (the same reasoning
and construction as vLLM's ``--api-key`` check and GitHub's token storage). A server-side
pepper (HMAC) would only help if the key file leaked without the pepper, and would be one
more secret to distribute; not worth it for random keys.

The key file (YAML; JSON is valid YAML) lists the keys and their policy::

    version: 1
    keys:
      - id: 5c1f0e9a2b3d
        name: team-search                 # a label (unique)
        sha256: 9f86d081884c7d65...       # 64 hex digits
        created: "2025-06-01T12:00:00Z"
        models: ["meta-llama/*"]          # optional; default: every model (fnmatch globs)
        profiles: [llmd-predicted]        # optional; x-headroom-profile values allowed
                                          #   besides the gateway's active profile (default none)
        priority: {min: -1000, max: 0}    # optional; x-headroom-priority range (default -1000..0)
        debug: false                      # optional; may ask for x-headroom-debug (default no)
        rate_limits:                      # optional; default: unlimited
          requests_per_minute: 600
          tokens_per_minute: 200000
          request_burst: 600              # optional; default: the per-minute figure
          token_burst: 200000             # optional; default: the per-minute figure

Parsing is strict (unknown fields, duplicate ids or names, bad values are errors naming the
entry), like the scheduling config.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml

from services.gateway.scheduling.config import PRIORITY_MAX, PRIORITY_MIN

KEY_PREFIX = "hr"
FILE_VERSION = 1
_ID = re.compile(r"^[0-9a-f]{12}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_LEN = len("hr-") + 12 + 1 + 43
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:/-]{0,99}$")
DEFAULT_PRIORITY = (PRIORITY_MIN, 0)  # a client may lower its priority, not raise it


class KeyFileError(ValueError):
    """The key file is invalid (the message names the file and the entry)."""


def generate_key() -> tuple[str, str]:
    """A new ``(id, key)``. The key is shown once; only :func:`key_digest` of it is kept."""
    key_id = secrets.token_hex(6)
    return key_id, f"{KEY_PREFIX}-{key_id}-{secrets.token_urlsafe(32)}"


def key_id_of(key: str) -> str | None:
    """The id inside a key shaped like ours (None otherwise). Only the shape is checked
    (cheaply, per request): the id then finds a record or not, and the hash decides."""
    if len(key) != _KEY_LEN or not key.startswith("hr-") or key[15] != "-":
        return None
    return key[3:15]


def key_digest(key: str) -> bytes:
    """SHA-256 of the key string (what the file stores, as hex)."""
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``per_minute`` units per minute on average, at most ``burst`` at once (GCRA: a bucket
    of ``burst`` refilled at ``per_minute`` per minute)."""

    per_minute: int
    burst: int

    @property
    def interval_us(self) -> float:
        """Microseconds between two units at the sustained rate."""
        return 60e6 / self.per_minute

    @property
    def tolerance_us(self) -> float:
        return self.burst * self.interval_us


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    models: tuple[str, ...] | None = None  # None: every model; else exact names or globs
    profiles: frozenset[str] = frozenset()
    priority: tuple[int, int] = DEFAULT_PRIORITY
    debug: bool = False
    requests: RateLimit | None = None
    tokens: RateLimit | None = None

    def allows_model(self, model: str) -> bool:
        if self.models is None:
            return True
        return any(model == m or fnmatch.fnmatchcase(model, m) for m in self.models)


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    name: str
    digest: bytes = field(repr=False)
    created: str = ""
    policy: KeyPolicy = KeyPolicy()


def new_api_key(name: str, policy: KeyPolicy, now: datetime | None = None) -> tuple[ApiKey, str]:
    """A new key record and the key itself (print it once, then forget it)."""
    key_id, key = generate_key()
    created = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ApiKey(key_id, name, key_digest(key), created, policy), key


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------
_ENTRY = {"id", "name", "sha256", "created", "models", "profiles", "priority", "debug",
          "rate_limits"}  # fmt: skip
_LIMITS = {"requests_per_minute", "tokens_per_minute", "request_burst", "token_burst"}


def _fail(where: str, msg: str) -> KeyFileError:
    return KeyFileError(f"{where}: {msg}")


def _int(v: Any, where: str, what: str, lo: int, hi: int | None = None) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise _fail(where, f"'{what}' must be an integer {rng}, got {v!r}")
    return v


def _strings(v: Any, where: str, what: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise _fail(where, f"'{what}' must be a list of non-empty strings, got {v!r}")
    return list(v)


def _limit(d: Mapping[str, Any], where: str, rate: str, burst: str) -> RateLimit | None:
    if rate not in d:
        if burst in d:
            raise _fail(where, f"'{burst}' needs '{rate}'")
        return None
    per_minute = _int(d[rate], where, rate, 1)
    return RateLimit(per_minute, _int(d.get(burst, per_minute), where, burst, 1))


def _policy(e: Mapping[str, Any], where: str) -> KeyPolicy:
    models = e.get("models")
    profiles = e.get("profiles", [])
    prio = e.get("priority", {"min": DEFAULT_PRIORITY[0], "max": DEFAULT_PRIORITY[1]})
    if not isinstance(prio, dict) or set(prio) - {"min", "max"}:
        raise _fail(where, f"'priority' must be {{min: int, max: int}}, got {prio!r}")
    lo = _int(prio.get("min", DEFAULT_PRIORITY[0]), where, "priority.min", PRIORITY_MIN, PRIORITY_MAX)  # fmt: skip
    hi = _int(prio.get("max", DEFAULT_PRIORITY[1]), where, "priority.max", PRIORITY_MIN, PRIORITY_MAX)  # fmt: skip
    if lo > hi:
        raise _fail(where, f"'priority.min' ({lo}) is above 'priority.max' ({hi})")
    debug = e.get("debug", False)
    if not isinstance(debug, bool):
        raise _fail(where, f"'debug' must be true or false, got {debug!r}")
    limits = e.get("rate_limits") or {}
    if not isinstance(limits, dict):
        raise _fail(where, f"'rate_limits' must be a mapping, got {limits!r}")
    if unknown := set(limits) - _LIMITS:
        raise _fail(where, f"unknown rate_limits field(s) {sorted(unknown)} (known: {sorted(_LIMITS)})")  # fmt: skip
    return KeyPolicy(
        models=None if models is None else tuple(_strings(models, where, "models")),
        profiles=frozenset(_strings(profiles, where, "profiles")),
        priority=(lo, hi),
        debug=debug,
        requests=_limit(limits, where, "requests_per_minute", "request_burst"),
        tokens=_limit(limits, where, "tokens_per_minute", "token_burst"),
    )


def _entry(e: Any, where: str) -> ApiKey:
    if not isinstance(e, dict):
        raise _fail(where, f"each key must be a mapping, got {type(e).__name__}")
    if unknown := set(e) - _ENTRY:
        raise _fail(where, f"unknown field(s) {sorted(unknown)} (known: {sorted(_ENTRY)})")
    key_id, name, digest = e.get("id"), e.get("name"), e.get("sha256")
    if not isinstance(key_id, str) or not _ID.match(key_id):
        raise _fail(where, f"'id' must be 12 lower-case hex digits, got {key_id!r}")
    where = f"{where} (id {key_id})"
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(where, f"'name' must match {_NAME.pattern}, got {name!r}")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise _fail(where, "'sha256' must be 64 lower-case hex digits (the key's SHA-256)")
    created = e.get("created", "")
    if not isinstance(created, str):
        created = str(created)
    return ApiKey(key_id, name, bytes.fromhex(digest), created, _policy(e, where))


def parse_key_file(text: str, source: str = "<keys>") -> list[ApiKey]:
    """The keys of a key file's text. Raises KeyFileError naming ``source`` and the entry."""
    try:
        if text.lstrip().startswith("{"):  # JSON: ~100x faster than YAML for a big file
            doc = orjson.loads(text)
        else:
            doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, orjson.JSONDecodeError) as e:
        raise KeyFileError(f"{source}: not valid YAML/JSON: {e}") from None
    if doc is None:
        doc = {"version": FILE_VERSION, "keys": []}
    if not isinstance(doc, dict) or set(doc) - {"version", "keys"}:
        raise KeyFileError(f"{source}: expected a mapping with 'version' and 'keys'")
    if doc.get("version", FILE_VERSION) != FILE_VERSION:
        raise KeyFileError(f"{source}: unsupported version {doc.get('version')!r}")
    entries = doc.get("keys") or []
    if not isinstance(entries, list):
        raise KeyFileError(f"{source}: 'keys' must be a list")
    keys = [_entry(e, f"{source}: keys[{i}]") for i, e in enumerate(entries)]
    for attr in ("id", "name"):
        seen: set[str] = set()
        for k in keys:
            v = getattr(k, attr)
            if v in seen:
                raise KeyFileError(f"{source}: duplicate key {attr} {v!r}")
            seen.add(v)
    return keys


# --------------------------------------------------------------------------------------
# Writing (headroom keys)
# --------------------------------------------------------------------------------------
def _policy_doc(p: KeyPolicy) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if p.models is not None:
        d["models"] = list(p.models)
    if p.profiles:
        d["profiles"] = sorted(p.profiles)
    if p.priority != DEFAULT_PRIORITY:
        d["priority"] = {"min": p.priority[0], "max": p.priority[1]}
    if p.debug:
        d["debug"] = True
    limits: dict[str, int] = {}
    for lim, rate, burst in ((p.requests, "requests_per_minute", "request_burst"),
                             (p.tokens, "tokens_per_minute", "token_burst")):  # fmt: skip
        if lim is not None:
            limits[rate] = lim.per_minute
            if lim.burst != lim.per_minute:
                limits[burst] = lim.burst
    if limits:
        d["rate_limits"] = limits
    return d


def key_doc(k: ApiKey) -> dict[str, Any]:
    """One entry of the file (no secret: the key's hash only)."""
    return {"id": k.id, "name": k.name, "sha256": k.digest.hex(), "created": k.created,
            **_policy_doc(k.policy)}  # fmt: skip


def dump_key_file(keys: Iterable[ApiKey]) -> str:
    head = (
        "# Headroom gateway API keys (managed with `headroom keys add|list|revoke`).\n"
        "# Only SHA-256 hashes of the keys are stored here; see README.md for the format.\n"
    )
    doc = {"version": FILE_VERSION, "keys": [key_doc(k) for k in keys]}
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)
