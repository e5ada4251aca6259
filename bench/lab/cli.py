"""`headroom lab` and `headroom lab compare` (argument parsing, progress bar, output files)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from contextlib import contextmanager
from pathlib import Path

from bench.lab.config import (
    DEFAULT_HORIZON_S,
    DEFAULT_INGRESS_MS,
    DEFAULT_INGRESS_US_PER_TOKEN,
    DEFAULT_MAX_TRAIN_CYCLES,
    DEFAULT_MODEL,
    DEFAULT_POD_INGRESS_MS,
    DEFAULT_POD_INGRESS_US_PER_TOKEN,
    DEFAULT_PREDICT_LATENCY_MS,
    ROLLOUT_OBJECTIVES,
    LabConfig,
)
from bench.lab.regret import DEFAULT_REGRET_SAMPLES, REQUESTS_PER_SAMPLE
from bench.lab.run import run_lab


def _positive(v: str) -> float:
    x = float(v)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return x


def _key_value(v: str) -> tuple[str, str]:
    key, sep, value = v.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {v!r}")
    return key.strip(), value.strip()


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", help="Mooncake .jsonl or Azure .csv trace")
    p.add_argument("--format", choices=("mooncake", "azure"), help="override the suffix guess")
    p.add_argument("--pods", type=int, default=8, help="simulated pods (default 8)")
    p.add_argument("--profile", default="h100-llama3-8b",
                   help="simulator hardware profile, or a mixed pool with counts summing to "
                   "--pods (h100-llama3-8b:4,a100-llama3-8b:4)")  # fmt: skip
    p.add_argument("--vllm-args", metavar="ARGS",
                   help='the pods\' `vllm serve` flags, e.g. "--max-num-seqs=256 '
                   '--no-enable-prefix-caching" (default: the profile\'s preset)')  # fmt: skip
    p.add_argument("--vllm-version", metavar="V",
                   help="vLLM version whose flag resolution to follow (default 0.11)")  # fmt: skip
    p.add_argument("--limit", type=int, help="at most this many trace requests")
    p.add_argument("--offset", type=int, default=0, help="skip this many trace requests")
    p.add_argument("--slo-ttft-ms", type=_positive, help="TTFT SLO (x-llm-d-slo-ttft-ms)")
    p.add_argument("--slo-tpot-ms", type=_positive, help="TPOT SLO (x-llm-d-slo-tpot-ms)")
    p.add_argument("--priority", type=int, help="request priority (default: model objective)")
    p.add_argument("--streaming", action="store_true", help="clients ask for streams")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name the pods serve")
    p.add_argument("--profiles", dest="profiles_path", help="scheduling profiles YAML")
    p.add_argument("--scrape-interval-ms", type=_positive, default=100.0,
                   help="collector scrape cadence in virtual ms (default 100)")  # fmt: skip
    p.add_argument("--ingress-ms", type=float, default=DEFAULT_INGRESS_MS,
                   help="client -> gateway routing time per request (default %(default)s)")  # fmt: skip
    p.add_argument("--pod-ingress-ms", type=float, default=DEFAULT_POD_INGRESS_MS,
                   help="gateway -> pod engine time per request (default %(default)s)")  # fmt: skip
    p.add_argument("--pod-ingress-us-per-token", type=float,
                   default=DEFAULT_POD_INGRESS_US_PER_TOKEN,
                   help="gateway -> pod engine time per prompt token (default %(default)s)")  # fmt: skip
    p.add_argument("--predict-latency-ms", type=float, default=DEFAULT_PREDICT_LATENCY_MS,
                   help="prediction call latency of predicting profiles (default %(default)s)")  # fmt: skip
    p.add_argument("--client-max-tokens", type=int, metavar="N",
                   help="every request sends max_tokens N (>= every output; default: each "
                   "request's own output length, an exact budget real clients seldom send)")  # fmt: skip
    p.add_argument("--ingress-us-per-token", type=float, default=DEFAULT_INGRESS_US_PER_TOKEN,
                   help="client -> gateway routing time per prompt token (HTTP, tokenizer; "
                   "default %(default)s)")  # fmt: skip
    p.add_argument("--train-interval-s", type=_positive,
                   help="refit check cadence in virtual s (default: auto, the trainer's "
                   "interval_s stretched to at most --max-train-cycles checks per run)")  # fmt: skip
    p.add_argument("--max-train-cycles", type=int, default=DEFAULT_MAX_TRAIN_CYCLES)
    p.add_argument("--publish-delay-s", type=float, default=0.5,
                   help="virtual seconds from promotion to the predictor serving it")  # fmt: skip
    p.add_argument("--mape-after", type=int, default=2000,
                   help="also report MAPE on requests routed after this many samples")  # fmt: skip
    p.add_argument("--llmd-twin", action="store_true",
                   help="predicting policies: also train llmd-predicted's learner (llm-d's "
                   "eleven features, squared error on raw ms) on the run's own samples and "
                   "report both models' MAPE on the same requests (prediction.llmd_twin)")  # fmt: skip
    p.add_argument("--trainer-objective", choices=("mean", "quantile", "both"),
                   help="trainer model objective (default: HEADROOM_TRAINER_OBJECTIVE)")  # fmt: skip
    p.add_argument("--predictor-objective", choices=("mean", "quantile"),
                   help="which models answer (default: HEADROOM_PREDICTOR_OBJECTIVE)")  # fmt: skip
    p.add_argument("--trainer-set", type=_key_value, action="append", default=[],
                   metavar="KEY=VALUE", help="override a trainer setting (e.g. rounds=100)")  # fmt: skip
    p.add_argument("--rollout-horizon-s", type=float, default=DEFAULT_HORIZON_S, metavar="S",
                   help="oracle-rollout(-blind) only: score each copy on the requests arriving "
                   f"within S seconds of the decision (default {DEFAULT_HORIZON_S:g})")  # fmt: skip
    p.add_argument("--rollout-objective", choices=ROLLOUT_OBJECTIVES, default="sum",
                   help="oracle-rollout(-blind) only: minimise the sum of the cohort's TTFTs "
                   "or of their squares (default sum)")  # fmt: skip
    p.add_argument("--regret-samples", type=int, metavar="N",
                   help="decisions whose regret is measured by replaying them on every "
                   f"candidate pod (0: off; default: one per {REQUESTS_PER_SAMPLE} requests, "
                   f"at most {DEFAULT_REGRET_SAMPLES})")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace, *, policy: str, rate_scale: float) -> LabConfig:
    overrides: dict[str, object] = dict(args.trainer_set)
    if args.trainer_objective:
        overrides["objective"] = args.trainer_objective
    return LabConfig(
        trace=args.trace,
        policy=policy,
        pods=args.pods,
        profile=args.profile,
        vllm_args=args.vllm_args,
        vllm_version=args.vllm_version,
        rate_scale=rate_scale,
        limit=args.limit,
        offset=args.offset,
        seed=args.seed,
        trace_format=args.format,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        priority=args.priority,
        streaming=args.streaming,
        model=args.model,
        profiles_path=args.profiles_path,
        scrape_interval_s=args.scrape_interval_ms / 1000.0,
        ingress_us_per_token=args.ingress_us_per_token,
        ingress_ms=args.ingress_ms,
        pod_ingress_ms=args.pod_ingress_ms,
        pod_ingress_us_per_token=args.pod_ingress_us_per_token,
        predict_latency_ms=args.predict_latency_ms,
        client_max_tokens=args.client_max_tokens,
        train_interval_s=args.train_interval_s,
        max_train_cycles=args.max_train_cycles,
        publish_delay_s=args.publish_delay_s,
        mape_after=args.mape_after,
        llmd_twin=args.llmd_twin,
        trainer_overrides=overrides,
        predictor_objective=args.predictor_objective,
        regret_samples=args.regret_samples,
        rollout_horizon_s=args.rollout_horizon_s,
        rollout_objective=args.rollout_objective,
        then_trace=getattr(args, "then_trace", None),
        then_rate_scale=getattr(args, "then_rate_scale", None),
        then_limit=getattr(args, "then_limit", None),
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headroom lab",
        description="Replay a trace against simulated pods in virtual time through the real "
        "scheduling, training and prediction code. `headroom lab compare --help` for the "
        "load ladder and the workload suite (--suite), `headroom lab workloads --help` for "
        "the suite's workloads.",
    )
    add_common_arguments(p)
    p.add_argument("--policy", default="headroom", help="scheduling profile (default headroom)")
    p.add_argument("--rate-scale", type=_positive, default=1.0,
                   help="divide inter-arrival times by this (2 = twice the rate)")  # fmt: skip
    p.add_argument(
        "--then-trace",
        help="a second trace whose requests follow the first's "
        "(a workload shift; prediction.mape_timeline shows the error around it)",
    )
    p.add_argument(
        "--then-rate-scale",
        type=_positive,
        help="rate scale of the second trace (default: --rate-scale)",
    )
    p.add_argument("--then-limit", type=int, help="at most this many second-trace requests")
    p.add_argument("--json", metavar="OUT", help="write the report here (default: stdout)")
    return p


def _suite_names() -> str:
    from bench.lab.suite import SUITES

    return " | ".join(["all", *SUITES])


def build_compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headroom lab compare",
        description="Run a load ladder for several policies; writes results.json, table.md "
        "and plots into --out.",
    )
    add_common_arguments(p)
    p.add_argument("--policies", default="round-robin,least-request,gie-default,prefix-aware,"
                   "cache-aware,llmd-predicted,headroom", help="comma-separated profiles")  # fmt: skip
    p.add_argument("--loads", default="0.5,0.8,1.0,1.2",
                   help="fractions of the estimated saturation throughput")  # fmt: skip
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--title", help="plot title (default: trace, pods, profile)")
    p.add_argument("--suite", help=f"run every workload of this suite ({_suite_names()}; "
                   "bench/lab/suite.py) instead of --trace; writes results.json, summary.json "
                   "and summary.md")  # fmt: skip
    p.add_argument("--workloads", help="with --suite: only these of its workloads "
                   "(comma-separated names; each runs exactly as in the whole suite)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="with --suite: parallel processes")
    p.add_argument("--seeds", help="with --suite: comma-separated lab seeds, the ladder once per "
                   "seed (workloads prepared once, with the first); writes seed-S/ per seed "
                   "and seeds.md / seeds.json (done-means 1 per seed, summed)")  # fmt: skip
    p.add_argument("--slo", choices=("both", "on", "off"), default="both",
                   help="with --suite: runs without SLO headers and with the workload's SLOs "
                   "(both, default), only with them (on) or only without (off)")  # fmt: skip
    p.add_argument("--full-traces", action="store_true",
                   help="with --suite: the real traces' whole halves, not their first windows")  # fmt: skip
    return p


def build_workloads_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headroom lab workloads",
        description="Characterise the suite's workloads (prompt/output lengths, block reuse, "
        "rate; bench/lab/characterise.py) and optionally write the generated ones.",
    )
    p.add_argument(
        "--suite",
        default="all",
        help=f"{_suite_names()} (default all)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--write", metavar="DIR", help="write the generated workloads here")
    p.add_argument("--full-traces", action="store_true", help="the real traces' whole halves")
    p.add_argument("--trace", action="append", default=[], metavar="FILE",
                   help="characterise this trace instead of a suite (repeatable)")  # fmt: skip
    return p


@contextmanager
def _progress(enabled: bool):
    """A rich progress bar on stderr (yields None when disabled)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as prog:
        yield prog


def summary_line(r: dict) -> str:
    slo = r["slo"]["attainment"]
    pred = r["prediction"] or {}
    parts = [
        f"{r['policy']}: {r['completed']}/{r['requests']} done",
        f"TTFT p50/p90 {r['ttft_ms']['p50']}/{r['ttft_ms']['p90']} ms",
        f"TPOT p50/p90 {r['tpot_ms']['p50']}/{r['tpot_ms']['p90']} ms",
    ]
    if slo is not None:
        parts.append(f"SLO attainment {100 * slo:.1f}%")
    if pred.get("ttft_mape") is not None:
        parts.append(f"MAPE ttft {pred['ttft_mape']:.3f} tpot {pred['tpot_mape']:.3f}")
    twin = pred.get("llmd_twin") or {}
    if twin.get("ttft_ratio") is not None and twin.get("tpot_ratio") is not None:
        parts.append(
            f"after {pred['after_samples']} samples vs the llm-d twin ({twin['requests']} "
            f"requests): ttft {twin['ttft_mape_after']:.3f} / {twin['twin_ttft_mape_after']:.3f}"
            f" = {twin['ttft_ratio']:.2f}x, tpot {twin['tpot_mape_after']:.3f} / "
            f"{twin['twin_tpot_mape_after']:.3f} = {twin['tpot_ratio']:.2f}x"
        )
    regret = r.get("regret_ms") or {}
    if regret.get("sampled"):
        parts.append(f"regret p50/p90 {regret['p50']}/{regret['p90']} ms ({regret['sampled']})")
    parts.append(f"wall {r['wall_seconds']} s")
    return "; ".join(parts)


def run(argv: list[str]) -> int:
    if argv and argv[0] == "compare":
        return run_compare_cli(argv[1:])
    if argv and argv[0] == "workloads":
        return run_workloads_cli(argv[1:])
    if argv and argv[0] == "summary":
        from bench.lab.suite_run import run_summary_cli

        return run_summary_cli(argv[1:])
    if argv and argv[0] == "versus":
        from bench.lab.suite_run import run_versus_cli

        return run_versus_cli(argv[1:])
    if argv and argv[0] == "decisions":
        from bench.lab.decisions import run_decisions_cli

        return run_decisions_cli(argv[1:])
    if argv and argv[0] == "plot-timeline":
        from bench.lab.timeline import run_plot_cli

        return run_plot_cli(argv[1:])
    args = build_parser().parse_args(argv)
    if not args.trace:
        print("headroom lab: --trace is required", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, policy=args.policy, rate_scale=args.rate_scale)
    except ValueError as e:
        print(f"headroom lab: {e}", file=sys.stderr)
        return 2
    with _progress(not args.quiet) as prog:
        task = prog.add_task(f"lab {args.policy}", total=None) if prog else None

        def progress(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)  # type: ignore[union-attr]

        try:
            report = run_lab(config, progress=progress if prog else None)
        except (ValueError, OSError) as e:
            print(f"headroom lab: {e}", file=sys.stderr)
            return 2
    text = json.dumps(report, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
        print(summary_line(report), file=sys.stderr)
    else:
        print(text)
    return 0


def run_compare_cli(argv: list[str]) -> int:
    from bench.lab.compare import run_compare, saturation_for, write_outputs

    args = build_compare_parser().parse_args(argv)
    if args.suite:
        return run_suite_cli(args)
    if not args.trace:
        print("headroom lab compare: --trace or --suite is required", file=sys.stderr)
        return 2
    if args.seeds:
        print("headroom lab compare: --seeds is for --suite (a ladder on one trace: --seed)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.workloads:
        print("headroom lab compare: --workloads is for --suite", file=sys.stderr)
        return 2
    try:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
        base = config_from_args(args, policy=policies[0] if policies else "", rate_scale=1.0)
        sat = saturation_for(base)
    except (ValueError, OSError) as e:
        print(f"headroom lab compare: {e}", file=sys.stderr)
        return 2
    print(
        f"estimated saturation: {sat.pod_rps:.3f} req/s per pod, {sat.cluster_rps:.2f} req/s "
        f"for {args.pods} pods; trace rate {sat.trace_rps:.3f} req/s; rate scale per load: "
        + ", ".join(f"{x:g} -> {sat.rate_scale(x):.3f}" for x in loads),
        file=sys.stderr,
    )
    with _progress(not args.quiet) as prog:
        overall = prog.add_task("runs", total=len(loads) * len(policies)) if prog else None
        current = prog.add_task("", total=None) if prog else None

        def on_start(policy: str, load: float, scale: float) -> None:
            if prog:
                prog.reset(current, description=f"{policy} @ load {load:g}", total=None)  # type: ignore[arg-type]

        def on_progress(done: int, total: int) -> None:
            if prog:
                prog.update(current, completed=done, total=total)  # type: ignore[arg-type]

        def on_done(report: dict) -> None:
            line = f"load {report['load']:g}: {summary_line(report)}"
            if prog:
                prog.advance(overall)  # type: ignore[arg-type]
                prog.console.print(line)
            else:
                print(line, file=sys.stderr, flush=True)

        try:
            _, results = run_compare(
                base, policies, loads, saturation=sat, on_start=on_start,
                on_progress=on_progress, on_done=on_done,
            )  # fmt: skip
        except (ValueError, OSError) as e:
            print(f"headroom lab compare: {e}", file=sys.stderr)
            return 2
    title = args.title or f"{Path(args.trace).name}, {args.pods} pods, {args.profile}"
    for path in write_outputs(results, Path(args.out), title):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def run_workloads_cli(argv: list[str]) -> int:
    import tempfile

    from bench.lab.characterise import characterise, table_markdown
    from bench.lab.suite_run import materialise
    from bench.lab.workloads import WorkloadSpec
    from bench.traces import read_trace

    args = build_workloads_parser().parse_args(argv)
    from bench.lab.suite import suite

    try:
        if args.trace:
            rows = [(Path(t).name, "-", "trace", characterise(read_trace(t).requests))
                    for t in args.trace]  # fmt: skip
            if args.json:
                print(json.dumps([{"name": n, "characterisation": c} for n, _, _, c in rows]))
            else:
                print(table_markdown(rows), end="")
            return 0
        entries = suite(args.suite, full_traces=args.full_traces)
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = Path(args.write) if args.write else Path(tmp)
            rows = []
            for split, entry in entries:
                w = materialise(split, entry, out_dir)
                trace = read_trace(w.trace, offset=w.offset, limit=w.limit)
                rows.append((w, characterise(trace.requests)))
    except (ValueError, OSError) as e:
        print(f"headroom lab workloads: {e}", file=sys.stderr)
        return 2
    if args.json:
        out = [{"name": w.name, "split": w.split, "family": w.family, "spec": w.spec,
                "characterisation": c} for w, c in rows]  # fmt: skip
        print(json.dumps(out, indent=1))
    else:
        print(table_markdown([(w.name, w.split, w.family, c) for w, c in rows]), end="")
        for w, _ in rows:
            seed = f" (seed {w.spec['seed']})" if "seed" in w.spec else ""
            print(f"- {w.name}{seed}: {w.spec['description']}")
    if args.write:
        n = sum(1 for _, e in entries if isinstance(e, WorkloadSpec))
        print(f"wrote {n} generated workloads into {args.write}", file=sys.stderr)
    return 0


def run_suite_cli(args: argparse.Namespace) -> int:
    from bench.lab.suite import suite
    from bench.lab.suite_run import commit, run_suite, write_outputs

    if args.trace or args.limit is not None or args.offset:
        print("headroom lab compare: --suite picks its own traces (no --trace/--limit/--offset)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.slo_ttft_ms or args.slo_tpot_ms:
        print("headroom lab compare: --suite derives each workload's SLOs (use --slo)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.jobs < 1:
        print("headroom lab compare: --jobs must be >= 1", file=sys.stderr)
        return 2
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()] if args.seeds else None
    except ValueError:
        print(f"headroom lab compare: --seeds takes integers ({args.seeds!r})", file=sys.stderr)
        return 2
    only = [w.strip() for w in args.workloads.split(",") if w.strip()] if args.workloads else None
    name = f"{args.suite} ({', '.join(only)})" if only else args.suite
    try:
        suite(args.suite, only=only)  # a wrong name fails before anything is written
    except ValueError as e:
        print(f"headroom lab compare: {e}", file=sys.stderr)
        return 2
    args.trace = "-"  # each workload sets its own
    started_at = commit()
    out = Path(args.out)
    done = [0]

    out.mkdir(parents=True, exist_ok=True)
    # every workload and run as it completes (what a cut-short suite leaves)
    partial = out / "results.partial.jsonl"
    partial.write_text("")
    (out / "workloads.partial.jsonl").write_text("")

    def on_prepared(w) -> None:
        with (out / "workloads.partial.jsonl").open("a") as f:
            f.write(json.dumps(dataclasses.asdict(w)) + "\n")
        if not args.quiet:
            s = w.saturation
            print(f"{w.name}: saturation {s['cluster_rps']:.2f} req/s ({args.pods} pods), "
                  f"SLO {w.slo['ttft_ms']:g}/{w.slo['tpot_ms']:g} ms", file=sys.stderr,
                  flush=True)  # fmt: skip

    def on_done(reports: list[dict]) -> None:
        done[0] += 1
        with partial.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in reports)
        if not args.quiet:
            r = reports[0]
            tag = " +SLO" if r["slo_headers"] else ""
            print(f"[{done[0]}] {r['workload']} load {r['load']:g}{tag}: {summary_line(r)}",
                  file=sys.stderr, flush=True)  # fmt: skip

    try:
        base = config_from_args(args, policy=policies[0] if policies else "", rate_scale=1.0)
        workloads, results = run_suite(
            args.suite, base, policies, loads, out, slo=args.slo, jobs=args.jobs,
            full_traces=args.full_traces, on_prepared=on_prepared, on_done=on_done,
            seeds=seeds, only=only,
        )  # fmt: skip
    except (ValueError, OSError) as e:
        print(f"headroom lab compare: {e}", file=sys.stderr)
        return 2
    for path in write_outputs(name, base, loads, args.slo, workloads, results, out,
                              started_at):  # fmt: skip
        print(f"wrote {path}", file=sys.stderr)
    return 0
