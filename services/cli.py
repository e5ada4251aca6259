"""The `headroom` command: `headroom up` runs the dev stack; `headroom <service>` runs one
service (configured by environment variables, see README)."""

from __future__ import annotations

import argparse
import importlib
import sys

SERVICES = ("gateway", "predictor", "trainer", "collector", "simulator")


def _up(args: argparse.Namespace) -> int:
    from services.launcher import StackConfig, run_foreground
    from shared.settings import CommonSettings

    common = CommonSettings()
    config = StackConfig(
        nats_url=common.nats_url,
        redis_url=common.redis_url,
        namespace=common.namespace,
        pool=common.pool,
        log_level=common.log_level,
        host=args.host,
        gateway_port=args.port,
        pods=args.pods,
        predictors=args.predictors,
        profile=args.profile,
        fixed_admin_ports=True,
    )
    return run_foreground(config)


def _health(args: argparse.Namespace) -> int:
    """Exit 0 only if every URL answers 200 (container healthchecks; no curl in slim images)."""
    import urllib.error
    import urllib.request

    for url in args.urls:
        try:
            with urllib.request.urlopen(url, timeout=args.timeout) as r:
                if r.status != 200:
                    print(f"{url}: HTTP {r.status}", file=sys.stderr)
                    return 1
        except (urllib.error.URLError, OSError) as e:
            print(f"{url}: {e}", file=sys.stderr)
            return 1
    return 0


def _sim_calibrate(args: argparse.Namespace) -> int:
    from services.simulator import calibrate

    return calibrate.run(args)


def _add_sim(sub: argparse._SubParsersAction) -> None:
    from services.simulator import calibrate

    sim = sub.add_parser("sim", help="simulator tools (calibration)")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    cal = sim_sub.add_parser(
        "calibrate", help="measure a profile's calibration points in virtual time"
    )
    calibrate.add_arguments(cal)
    cal.set_defaults(func=_sim_calibrate)


def _autoscale(args: argparse.Namespace) -> int:
    from services.autoscale.cli import main as autoscale_main

    return autoscale_main(args.args)


def _lab_or_replay(command: str, argv: list[str]) -> int:
    if command == "lab":
        from bench.lab.cli import run
    else:
        from bench.replay import run
    return run(argv)


def _lab(args: argparse.Namespace) -> int:
    return _lab_or_replay("lab", args.args)


def _replay(args: argparse.Namespace) -> int:
    return _lab_or_replay("replay", args.args)


def _bench(argv: list[str]) -> int:
    """`headroom bench predictor|gateway|inference|prediction-bound ...` (each parses its own
    options)."""
    kinds = ("predictor", "gateway", "inference", "prediction-bound", "access")
    if not argv or argv[0] not in kinds:
        print(f"usage: headroom bench {{{','.join(kinds)}}} [options] (--help for each)")
        return 2
    if argv[0] == "predictor":
        from bench.bench_predictor import run
    elif argv[0] == "gateway":
        from bench.bench_gateway import run
    elif argv[0] == "inference":
        from bench.bench_inference import run
    elif argv[0] == "access":
        from bench.bench_access import run
    else:
        from bench.bench_prediction_bound import run
    return run(argv[1:])


def _settings(args: argparse.Namespace) -> int:
    from services import settings_doc

    return settings_doc.main(["--update-readme", args.update_readme] if args.update_readme else [])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "model":
        from services import model_cli

        sys.exit(model_cli.main(argv[1:]))
    if argv and argv[0] == "keys":
        from services import keys_cli

        sys.exit(keys_cli.main(argv[1:]))
    if argv and argv[0] in SERVICES:
        module = importlib.import_module(f"services.{argv[0]}.main")
        module.main(argv[1:])
        return
    if argv and argv[0] in ("lab", "replay"):  # they parse their own options
        sys.exit(_lab_or_replay(argv[0], argv[1:]))
    if argv and argv[0] == "bench":
        sys.exit(_bench(argv[1:]))
    parser = argparse.ArgumentParser(prog="headroom", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run the whole dev stack as local processes")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8080, help="gateway port")
    up.add_argument("--pods", type=int, default=4, help="simulated pods")
    up.add_argument("--predictors", type=int, default=2, help="predictor replicas")
    up.add_argument("--profile", default="h100-llama3-8b", help="simulator hardware profile")
    up.set_defaults(func=_up)
    sub.add_parser("model", help="model versions: list|show|history|rollback|export|import|flush")
    sub.add_parser("keys", help="gateway API keys: add|list|revoke (the key file)")
    health = sub.add_parser("health", help="exit 0 if every URL answers HTTP 200")
    health.add_argument("urls", nargs="+")
    health.add_argument("--timeout", type=float, default=2.0)
    health.set_defaults(func=_health)
    _add_sim(sub)
    autoscale = sub.add_parser(
        "autoscale", add_help=False, help="autoscaling tools (recommend: replicas HPA would reach)"
    )
    autoscale.add_argument("args", nargs=argparse.REMAINDER)
    autoscale.set_defaults(func=_autoscale)
    lab = sub.add_parser(
        "lab", add_help=False,
        help="routing lab: replay a trace against simulated pods in virtual time "
        "(`lab compare`: load ladder, table, plots)",
    )  # fmt: skip
    lab.add_argument("args", nargs=argparse.REMAINDER)
    lab.set_defaults(func=_lab)
    replay = sub.add_parser(
        "replay", add_help=False, help="send a trace to a running gateway (load generator)"
    )
    replay.add_argument("args", nargs=argparse.REMAINDER)
    replay.set_defaults(func=_replay)
    sub.add_parser(
        "bench", add_help=False,
        help="benchmarks: `bench predictor` (decisions/s, latency), `bench gateway` (what the "
        "gateway adds), `bench inference` (the predictor's inference paths), "
        "`bench prediction-bound` (how predictable latency is at all), `bench access` (what "
        "API keys and rate limits cost per request)",
    )  # fmt: skip
    settings = sub.add_parser("settings", help="print every service's settings (Markdown)")
    settings.add_argument("--update-readme", metavar="PATH", nargs="?", const="README.md")
    settings.set_defaults(func=_settings)
    for name in SERVICES:
        sub.add_parser(name, help=f"run the {name} service (settings from HEADROOM_* env)")
    args = parser.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
