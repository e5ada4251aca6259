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
        restart=not args.no_restart,
        gateways=args.gateways,
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


def _sim_inference_perf(args: argparse.Namespace) -> int:
    from services.simulator.inference_perf import cli as ip

    return ip.run(args)


def _add_sim(sub: argparse._SubParsersAction) -> None:
    from services.simulator import calibrate
    from services.simulator.inference_perf import cli as ip

    sim = sub.add_parser("sim", help="simulator tools (calibration, inference-perf runs)")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    cal = sim_sub.add_parser(
        "calibrate", help="measure a profile's calibration points in virtual time"
    )
    calibrate.add_arguments(cal)
    cal.set_defaults(func=_sim_calibrate)
    perf = sim_sub.add_parser(
        "inference-perf",
        help="run an inference-perf config against one simulated pod (virtual time), "
        "writing inference-perf's lifecycle reports",
    )
    ip.add_arguments(perf)
    perf.set_defaults(func=_sim_inference_perf)


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


# `headroom bench KIND`: the module under bench/ whose run(argv) does it (each parses its own
# options)
BENCHES: dict[str, str] = {
    "predictor": "bench.bench_predictor",
    "gateway": "bench.bench_gateway",
    "inference": "bench.bench_inference",
    "prediction-bound": "bench.bench_prediction_bound",
    "access": "bench.bench_access",
    "sim-vs-measured": "bench.bench_sim_vs_measured",
    "faults": "bench.bench_faults",
    "soak": "bench.bench_soak",
}


def _bench(argv: list[str]) -> int:
    """`headroom bench KIND [options]`, KIND one of :data:`BENCHES`."""
    if not argv or argv[0] not in BENCHES:
        print(f"usage: headroom bench {{{','.join(BENCHES)}}} [options] (--help for each)")
        return 2
    return importlib.import_module(BENCHES[argv[0]]).run(argv[1:])


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
    up.add_argument(
        "--gateways", type=int, default=1, help="gateway replicas (the first on --port)"
    )
    up.add_argument(
        "--no-restart", action="store_true",
        help="do not restart a service that exits: the first exit stops the stack",
    )  # fmt: skip
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
        "(`lab compare`: load ladder, table, plots; `lab compare --suite train`: the workload "
        "suite; `lab workloads`: the suite's workloads)",
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
        "API keys and rate limits cost per request), `bench sim-vs-measured` (the simulator "
        "against a measured vLLM benchmark), `bench faults` (each failure on a live stack), "
        "`bench soak` (many concurrent streams for minutes)",
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
