"""`headroom keys add|list|revoke`: manage the gateway's API key file.

The file is the one the gateway reads (``--file``, default ``HEADROOM_GATEWAY_API_KEYS_PATH``);
running gateways pick changes up within ``HEADROOM_GATEWAY_API_KEYS_RELOAD_S``.

- ``add --name NAME [policy options]``: creates a key and prints it, once, on stdout (the
  only line there, for ``KEY=$(headroom keys add ...)``); the file keeps only its SHA-256.
- ``list [--json]``: the keys' ids, names and policies; never a key, never a hash.
- ``revoke ID_OR_NAME``: removes the key; gateways refuse it from their next reload.

Writes are atomic (a temporary file in the same directory, fsync, rename) and serialised by
an advisory lock on ``<file>.lock``; the file is created with mode 0600. For Kubernetes, the
file becomes a Secret: ``kubectl create secret generic headroom-api-keys
--from-file=keys.yaml=PATH --dry-run=client -o yaml | kubectl apply -f -``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson

from services.gateway.api_keys import (
    DEFAULT_PRIORITY,
    ApiKey,
    KeyFileError,
    KeyPolicy,
    RateLimit,
    dump_key_file,
    key_doc,
    new_api_key,
    parse_key_file,
)


def _read(path: Path) -> list[ApiKey]:
    if not path.exists():
        return []
    return parse_key_file(path.read_text(encoding="utf-8"), str(path))


def _write(path: Path, keys: list[ApiKey]) -> None:
    text = dump_key_file(keys)
    parse_key_file(text, str(path))  # never write a file the gateway would refuse
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _csv(v: str | None) -> list[str] | None:
    if v is None:
        return None
    return [x.strip() for x in v.split(",") if x.strip()]


def _policy(a: argparse.Namespace) -> KeyPolicy:
    def limit(rate: int | None, burst: int | None, what: str) -> RateLimit | None:
        if rate is None:
            if burst is not None:
                raise KeyFileError(f"--{what}-burst needs --{what}s-per-minute")
            return None
        return RateLimit(rate, burst if burst is not None else rate)

    models = _csv(a.models)
    return KeyPolicy(
        models=tuple(models) if models else None,
        profiles=frozenset(_csv(a.profiles) or ()),
        priority=(a.priority_min, a.priority_max),
        debug=a.debug,
        requests=limit(a.requests_per_minute, a.request_burst, "request"),
        tokens=limit(a.tokens_per_minute, a.token_burst, "token"),
    )


def _add(a: argparse.Namespace, path: Path) -> int:
    with _locked(path):
        keys = _read(path)
        if any(k.name == a.name for k in keys):
            print(f"a key named {a.name!r} exists already in {path}", file=sys.stderr)
            return 1
        record, key = new_api_key(a.name, _policy(a))
        _write(path, [*keys, record])
    print(f"added key {record.id} ({record.name}) to {path}; the key is printed once, "
          "below: store it now", file=sys.stderr)  # fmt: skip
    print(key)
    return 0


def _describe(k: ApiKey) -> str:
    d = key_doc(k)
    d.pop("sha256")
    policy = {x: d[x] for x in d if x not in ("id", "name", "created")}
    return f"{k.id}  {k.name:<24} {k.created:<21} {orjson.dumps(policy).decode() if policy else '(defaults)'}"  # fmt: skip


def _list(a: argparse.Namespace, path: Path) -> int:
    keys = _read(path)
    if a.json:
        docs = []
        for k in keys:
            d = key_doc(k)
            d.pop("sha256")
            docs.append(d)
        print(orjson.dumps(docs, option=orjson.OPT_INDENT_2).decode())
        return 0
    if not keys:
        print(f"no keys in {path}", file=sys.stderr)
    for k in keys:
        print(_describe(k))
    return 0


def _revoke(a: argparse.Namespace, path: Path) -> int:
    with _locked(path):
        keys = _read(path)
        gone = [k for k in keys if a.key in (k.id, k.name)]
        if not gone:
            print(f"no key with id or name {a.key!r} in {path}", file=sys.stderr)
            return 1
        _write(path, [k for k in keys if k not in gone])
    for k in gone:
        print(f"revoked key {k.id} ({k.name})", file=sys.stderr)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--file", help="key file (default: $HEADROOM_GATEWAY_API_KEYS_PATH)")
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="create a key (printed once)")
    add.add_argument("--name", required=True, help="a unique label for the key")
    add.add_argument("--models", help="comma-separated models or globs (default: every model)")
    add.add_argument("--profiles", help="comma-separated profiles it may pick with "
                     "x-headroom-profile besides the active one (default: none)")  # fmt: skip
    add.add_argument("--priority-min", type=int, default=DEFAULT_PRIORITY[0])
    add.add_argument("--priority-max", type=int, default=DEFAULT_PRIORITY[1],
                     help="x-headroom-priority range (default %(default)s)")  # fmt: skip
    add.add_argument("--debug", action="store_true", help="may ask for x-headroom-debug")
    add.add_argument("--requests-per-minute", type=int)
    add.add_argument("--request-burst", type=int)
    add.add_argument("--tokens-per-minute", type=int)
    add.add_argument("--token-burst", type=int)
    lst = sub.add_parser("list", help="list keys (never the keys themselves)")
    lst.add_argument("--json", action="store_true")
    rev = sub.add_parser("revoke", help="remove a key")
    rev.add_argument("key", metavar="ID_OR_NAME")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    file = a.file or os.environ.get("HEADROOM_GATEWAY_API_KEYS_PATH", "")
    if not file:
        print("no key file: pass --file or set HEADROOM_GATEWAY_API_KEYS_PATH", file=sys.stderr)
        return 2
    path = Path(file)
    try:
        return {"add": _add, "list": _list, "revoke": _revoke}[a.command](a, path)
    except (KeyFileError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
