"""`headroom model list|show|history|rollback|export|import|flush`: model versions of a running
stack (Redis at HEADROOM_REDIS_URL, announcements on HEADROOM_NATS_URL, keys and subjects under
HEADROOM_NAMESPACE; flags override them).

- ``list``: kept versions, newest first, current marked, with their holdout metrics.
- ``show [VERSION]``: one version's metadata (default: current) as JSON.
- ``history``: recent promotions, rejected candidates (and why), rollbacks, imports.
- ``rollback VERSION``: verify the version loads, point ``current`` at it, announce it; every
  predictor switches on the announcement (or its periodic check if NATS is unreachable).
- ``export [VERSION] -o FILE``: the version's metadata and UBJ blobs in one JSON file.
- ``import FILE``: verify a file and store it as a new version (current unless
  ``--no-activate``): a warm start for a new deployment.
- ``flush``: ask the trainer to drop its training window (after a workload shift).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from redis.exceptions import RedisError

from shared.bus import connect_redis, nats_options, redact_url
from shared.model_store import (
    append_history,
    current_version,
    encode_model_file,
    import_model_file,
    list_versions,
    read_history,
    read_meta,
    read_version,
    set_current,
)
from shared.schemas import ModelAnnouncement, ModelMeta, SchemaError
from shared.settings import CommonSettings
from shared.subjects import Names


class CliError(Exception):
    """A user-facing failure: printed without a traceback, exit status 1."""


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, int | float) else "-"


def _num(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, int | float) else "-"


def describe_metrics(meta: ModelMeta) -> str:
    """``ttft MAPE 4.8% MAE 12.3 | tpot_p90 MAPE 9.1% cov 89.0%`` for one version."""
    parts = []
    for key, m in sorted(meta.metrics.items()):
        if not isinstance(m, dict):
            continue
        s = f"{key} MAPE {_pct(m.get('mape'))} MAE {_num(m.get('mae'))}"
        if m.get("coverage") is not None:
            s += f" cov {_pct(m.get('coverage'))}"
        parts.append(s)
    return " | ".join(parts) or "-"


def format_list(rows: list[tuple[str, ModelMeta | None, str | None]], current: str | None) -> str:
    lines = [f"{'':1} {'version':8} {'created (UTC)':19} {'samples':>7} {'source':7} metrics"]
    for version, meta, error in rows:
        mark = "*" if version == current else " "
        if meta is None:
            lines.append(f"{mark} {version:8} unreadable: {error}")
            continue
        lines.append(
            f"{mark} {version:8} {_when(meta.created_at):19} {meta.samples:>7} "
            f"{meta.source:7} {describe_metrics(meta)}"
        )
    if not rows:
        lines.append("  (no model versions yet)")
    return "\n".join(lines)


def _json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


async def _connect_nats(bus: CommonSettings):
    """One connection attempt, no reconnect loop (a CLI must not hang on a dead server),
    with the settings' credentials and TLS (shared/bus.py)."""
    import nats

    async def _quiet(_: Exception) -> None:
        return None

    return await nats.connect(
        bus.nats_url, name="headroom-model-cli", connect_timeout=2.0, allow_reconnect=False,
        max_reconnect_attempts=1, reconnect_time_wait=0.2, error_cb=_quiet,
        **nats_options(bus),
    )  # fmt: skip


async def _announce(bus: CommonSettings, names: Names, version: str, created_at: float) -> bool:
    try:
        nc = await asyncio.wait_for(_connect_nats(bus), 5.0)
    except Exception as e:
        print(f"warning: could not announce on NATS ({e}); predictors switch at their "
              "next periodic check", file=sys.stderr)  # fmt: skip
        return False
    try:
        await nc.publish(names.model_announce, ModelAnnouncement(version, created_at).encode())
        await nc.flush(timeout=2.0)
    finally:
        await nc.close()
    return True


async def _run(args: argparse.Namespace, bus: CommonSettings, names: Names) -> int:
    r = connect_redis(bus)
    try:
        return await COMMANDS[args.command](args, r, names, bus)
    finally:
        await r.aclose()


async def cmd_list(args, r, names: Names, bus: CommonSettings) -> int:
    rows = await list_versions(r, names)
    current = await current_version(r, names)
    if args.json:
        out = [
            {
                "version": v,
                "current": v == current,
                "meta": m.to_dict() if m else None,
                "error": e,
            }
            for v, m, e in rows
        ]
        print(_json({"namespace": names.namespace, "current": current, "versions": out}))
    else:
        print(format_list(rows, current))
    return 0


async def cmd_show(args, r, names: Names, bus: CommonSettings) -> int:
    version = args.version or await current_version(r, names)
    if version is None:
        raise CliError("no current model version")
    meta = await read_meta(r, names, version)
    print(_json({**meta.to_dict(), "current": version == await current_version(r, names)}))
    return 0


async def cmd_history(args, r, names: Names, bus: CommonSettings) -> int:
    records = await read_history(r, names, args.n)
    if args.json:
        print(_json(records))
        return 0
    for rec in records:
        what = rec.get("version") or rec.get("to") or f"(kept {rec.get('current')})"
        print(
            f"{_when(rec.get('ts'))}  {rec.get('action', '?'):8} {what:6} {rec.get('reason', '')}"
        )
    if not records:
        print("(no history)")
    return 0


async def cmd_rollback(args, r, names: Names, bus: CommonSettings) -> int:
    try:
        previous = await set_current(r, names, args.version)
    except SchemaError as e:
        raise CliError(f"cannot roll back to {args.version}: {e}") from e
    now = time.time()
    await append_history(
        r,
        names,
        {
            "ts": now,
            "action": "rollback",
            "from": previous,
            "to": args.version,
            "reason": f"rollback from {previous}",
        },
    )
    meta = await read_meta(r, names, args.version)
    announced = await _announce(bus, names, args.version, meta.created_at)
    print(f"current model: {args.version} (was {previous}); "
          f"{'announced to predictors' if announced else 'not announced'}")  # fmt: skip
    return 0


async def cmd_export(args, r, names: Names, bus: CommonSettings) -> int:
    version = args.version or await current_version(r, names)
    if version is None:
        raise CliError("no current model version")
    meta, blobs = await read_version(r, names, version)
    data = encode_model_file(meta, blobs)
    if args.output == "-":
        sys.stdout.write(data.decode() + "\n")
    else:
        await asyncio.to_thread(Path(args.output).write_bytes, data)
        print(f"exported {version} to {args.output} ({len(data)} bytes)")
    return 0


async def cmd_import(args, r, names: Names, bus: CommonSettings) -> int:
    try:
        data = await asyncio.to_thread(Path(args.file).read_bytes)
    except OSError as e:
        raise CliError(f"cannot read {args.file}: {e}") from e
    try:
        meta = await import_model_file(
            r, names, data, origin=args.file, now=time.time(), keep=args.keep,
            activate=not args.no_activate,
        )  # fmt: skip
    except SchemaError as e:
        raise CliError(f"refused {args.file}: {e}") from e
    announced = False
    if not args.no_activate:
        announced = await _announce(bus, names, meta.version, meta.created_at)
    state = "current" if not args.no_activate else "kept, not current"
    print(f"imported {args.file} as {meta.version} ({state}"
          f"{', announced' if announced else ''})")  # fmt: skip
    return 0


async def cmd_flush(args, r, names: Names, bus: CommonSettings) -> int:

    try:
        nc = await asyncio.wait_for(_connect_nats(bus), 5.0)
    except Exception as e:
        raise CliError(f"cannot reach NATS at {redact_url(bus.nats_url)}: {e}") from e
    try:
        msg = await nc.request(names.trainer_flush, b"{}", timeout=args.timeout)
    except Exception as e:
        raise CliError(f"no trainer answered the flush request: {e}") from e
    finally:
        await nc.close()
    print(msg.data.decode())
    return 0


COMMANDS = {
    "list": cmd_list,
    "show": cmd_show,
    "history": cmd_history,
    "rollback": cmd_rollback,
    "export": cmd_export,
    "import": cmd_import,
    "flush": cmd_flush,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--namespace", help="default: HEADROOM_NAMESPACE or 'headroom'")
    p.add_argument("--redis-url", help="default: HEADROOM_REDIS_URL")
    p.add_argument("--nats-url", help="default: HEADROOM_NATS_URL")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="kept versions with their evaluation metrics")
    ls.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one version's metadata (default: current)")
    show.add_argument("version", nargs="?")
    hist = sub.add_parser("history", help="promotions, rejections, rollbacks, imports")
    hist.add_argument("-n", type=int, default=20)
    hist.add_argument("--json", action="store_true")
    rb = sub.add_parser("rollback", help="make a kept version current and announce it")
    rb.add_argument("version")
    ex = sub.add_parser("export", help="write a version (default: current) to a file")
    ex.add_argument("version", nargs="?")
    ex.add_argument("-o", "--output", required=True, help="file, or - for stdout")
    im = sub.add_parser("import", help="store a model file as a new version (warm start)")
    im.add_argument("file")
    im.add_argument("--no-activate", action="store_true", help="keep it, do not make it current")
    im.add_argument("--keep", type=int, default=5, help="versions kept in Redis")
    fl = sub.add_parser("flush", help="ask the trainer to drop its training window")
    fl.add_argument("--timeout", type=float, default=5.0)
    return p


def main(argv: list[str]) -> int:
    """Entry point for ``headroom model ...``; returns the exit status."""
    args = build_parser().parse_args(argv)
    common = CommonSettings()
    bus = common.model_copy(
        update={"redis_url": args.redis_url or common.redis_url,
                "nats_url": args.nats_url or common.nats_url}
    )  # fmt: skip
    try:
        names = Names(args.namespace or common.namespace)
        return asyncio.run(_run(args, bus, names))
    except (CliError, SchemaError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError, RedisError) as e:
        print(f"error: cannot reach the stack: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
