"""``headroom sim inference-perf``: run an inference-perf config against one simulated pod.

    headroom sim inference-perf --config FILE --vllm-args "ARGS" [--profile P]
        [--vllm-version V] [--rates-from DIR] [--prompt-len-from DIR] [--seed S] --out DIR

Writes ``stage_N_lifecycle_metrics.json`` and ``summary_lifecycle_metrics.json`` into
``--out`` (inference-perf's layout, see ``report.py``), plus ``simulation.json`` (the
resolved engine, the sweep's probe, prefix-cache counters), and prints a table per stage.
``--rates-from DIR`` takes the stage rates from a measured run's
``stage_N_lifecycle_metrics.json`` (``load_summary.requested_rate``); ``--prompt-len-from
DIR`` stretches the drawn prompts to that run's mean ``prompt_len`` (the server re-tokenises
inference-perf's decoded random ids into more tokens than were drawn).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from services.simulator.inference_perf.client import BenchResult, run_benchmark
from services.simulator.inference_perf.config import BenchConfig, read_config
from services.simulator.inference_perf.datagen import token_scale_for
from services.simulator.inference_perf.report import PER_TOKEN, RELEASE, lifecycle_reports
from services.simulator.profiles import PROFILES
from services.simulator.vllm_args import DEFAULT_VLLM_VERSION, Resolved, resolve_named

CLOCKS = {"release": RELEASE, "per-token": PER_TOKEN}


def measured_stages(directory: str | Path) -> list[dict]:
    """A measured run's stage files, ``stage_0`` up to the first missing one."""
    d = Path(directory)
    out = []
    while (f := d / f"stage_{len(out)}_lifecycle_metrics.json").exists():
        out.append(json.loads(f.read_text()))
    if not out:
        raise ValueError(f"no stage_0_lifecycle_metrics.json in {d}")
    return out


def measured_rates(directory: str | Path) -> list[float]:
    return [float(s["load_summary"]["requested_rate"]) for s in measured_stages(directory)]


def measured_prompt_len(directory: str | Path) -> float:
    """Mean prompt length over a measured run's successes (stage files, count-weighted)."""
    stages = measured_stages(directory)
    n = sum(s["successes"]["count"] for s in stages)
    if n == 0:
        raise ValueError(f"no successful requests in {directory}")
    return sum(s["successes"]["count"] * s["successes"]["prompt_len"]["mean"] for s in stages) / n


def simulate(
    config: BenchConfig,
    resolved: Resolved,
    *,
    seed: int = 0,
    rates_from: str | None = None,
    prompt_len_from: str | None = None,
    clock: str = "release",
) -> tuple[BenchResult, dict[str, dict], dict]:
    """Run the benchmark; returns the raw result, the lifecycle reports (name -> JSON
    object) and the run's description."""
    rates = measured_rates(rates_from) if rates_from else None
    scale = (
        token_scale_for(config, measured_prompt_len(prompt_len_from)) if prompt_len_from else 1.0
    )
    result = run_benchmark(
        config, resolved.profile, seed=seed, stage_rates=rates, token_scale=scale
    )
    reports = lifecycle_reports(
        ((s.stage, s.rate, s.records) for s in result.stages),
        config.percentiles,
        streaming=config.streaming,
        clock=CLOCKS[clock],
    )
    q, h = result.prefix_cache_queries, result.prefix_cache_hits
    notes = list(resolved.notes)
    if not config.ignore_eos:
        notes.append(
            "server.ignore_eos is false: the simulator has no end-of-sequence model, every "
            "answer runs to its max_tokens (as with ignore_eos)"
        )
    meta = {
        "engine": resolved.describe(),
        "vllm_version": resolved.vllm_version,
        "notes": notes,
        "seed": seed,
        "rates_from": rates_from,
        "prompt_len_from": prompt_len_from,
        "token_scale": round(scale, 6),
        "client_timestamps": clock,
        "client_concurrency": config.load.concurrency,
        "probe": None
        if result.probe is None
        else {"rate": result.probe.rate, "saturation_estimate": round(result.probe.estimate, 3)},
        "stage_rates": [s.rate for s in result.stages],
        "prefix_cache": {"queries": q, "hits": h, "hit_rate": round(h / q, 4) if q else None},
        "preemptions": result.preemptions,
        "virtual_seconds": round(result.virtual_seconds, 3),
    }
    return result, reports, meta


def stage_rows(reports: dict[str, dict]) -> list[dict]:
    """The headline figures of each stage report (ms and req/s)."""
    rows = []
    i = 0
    while (r := reports.get(f"stage_{i}_lifecycle_metrics")) is not None:
        lat = r["successes"]["latency"]

        def q(name: str, key: str, lat=lat) -> float | None:
            d = lat[name]
            return None if d is None else d[key] * 1000.0

        rows.append({
            "stage": i,
            "requested_rps": r["load_summary"]["requested_rate"],
            "achieved_rps": r["load_summary"]["achieved_rate"],
            "throughput_rps": r["successes"]["throughput"]["requests_per_sec"],
            "ttft_p50_ms": q("time_to_first_token", "median"),
            "ttft_p90_ms": q("time_to_first_token", "p90"),
            "e2e_p50_ms": q("request_latency", "median"),
            "ntpot_p50_ms": q("normalized_time_per_output_token", "median"),
            "tpot_p50_ms": q("time_per_output_token", "median"),
            "failures": r["failures"]["count"],
        })  # fmt: skip
        i += 1
    return rows


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def format_table(rows: Sequence[dict]) -> str:
    head = (f"{'stage':>5} {'req/s':>8} {'achieved':>9} {'done/s':>8} {'TTFT p50':>9} "
            f"{'TTFT p90':>9} {'E2E p50':>8} {'NTPOT p50':>10} {'TPOT p50':>9} {'fail':>5}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['stage']:>5} {r['requested_rps']:>8.2f} {r['achieved_rps']:>9.2f} "
            f"{r['throughput_rps']:>8.2f} {_fmt(r['ttft_p50_ms']):>9} {_fmt(r['ttft_p90_ms']):>9} "
            f"{_fmt(r['e2e_p50_ms']):>8} {_fmt(r['ntpot_p50_ms'], '.2f'):>10} "
            f"{_fmt(r['tpot_p50_ms'], '.2f'):>9} {r['failures']:>5}"
        )
    lines.append("(latencies in ms, inference-perf's definitions; done/s = successes per second)")
    return "\n".join(lines)


def write_reports(out: str | Path, reports: dict[str, dict], meta: dict) -> list[Path]:
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, body in reports.items():
        p = d / f"{name}.json"
        p.write_text(json.dumps(body))
        paths.append(p)
    p = d / "simulation.json"
    p.write_text(json.dumps(meta, indent=1) + "\n")
    paths.append(p)
    return paths


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", required=True, help="inference-perf config YAML")
    ap.add_argument("--vllm-args", default="",
                    help='the pod\'s `vllm serve` flags, e.g. "--max-num-seqs=128 --max-model-len=512"')  # fmt: skip
    ap.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION,
                    help="vLLM version whose flag resolution to follow (default %(default)s)")  # fmt: skip
    ap.add_argument("--profile", default="h100-llama3-8b", choices=sorted(PROFILES),
                    help="hardware/model profile (default %(default)s)")  # fmt: skip
    ap.add_argument("--rates-from", metavar="DIR",
                    help="take the stage rates from a measured run's stage files")  # fmt: skip
    ap.add_argument("--prompt-len-from", metavar="DIR",
                    help="match a measured run's mean prompt length (re-tokenisation)")  # fmt: skip
    ap.add_argument("--client-timestamps", choices=sorted(CLOCKS), default="release",
                    help="token timestamps as the measured release records them (default) "
                    "or one per token (inference-perf after PR #566)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="directory for the lifecycle reports")


def run(args: argparse.Namespace) -> int:
    try:
        config = read_config(args.config)
        resolved = resolve_named(args.profile, args.vllm_args, args.vllm_version)
        print(resolved.describe(), file=sys.stderr)
        _, reports, meta = simulate(
            config, resolved, seed=args.seed, rates_from=args.rates_from,
            prompt_len_from=args.prompt_len_from, clock=args.client_timestamps,
        )  # fmt: skip
    except (ValueError, OSError) as e:
        print(f"headroom sim inference-perf: {e}", file=sys.stderr)
        return 2
    for note in meta["notes"]:
        print(f"note: {note}", file=sys.stderr)
    paths = write_reports(args.out, reports, meta)
    print(format_table(stage_rows(reports)))
    if meta["probe"] is not None:
        print(f"sweep probe: {meta['probe']['rate']:g} req/s, saturation estimate "
              f"{meta['probe']['saturation_estimate']:g}")  # fmt: skip
    pc = meta["prefix_cache"]
    print(f"prefix cache hit rate {pc['hit_rate']}; preemptions {meta['preemptions']}; "
          f"wrote {len(paths)} files to {args.out}")  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="headroom sim inference-perf", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    add_arguments(ap)
    sys.exit(run(ap.parse_args(argv)))
