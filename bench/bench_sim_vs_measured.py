"""The simulator against measured vLLM: an inference-perf run, stage by stage (issue 17).

For each measured configuration (a directory of inference-perf ``stage_N`` /
``summary_lifecycle_metrics.json`` files) the same benchmark is run against one simulated pod
with the deployment's vLLM flags (``headroom sim inference-perf`` with ``--rates-from`` and
``--prompt-len-from`` that directory), and the two are compared per stage: TTFT p50/p90, E2E
p50, normalised TPOT p50, achieved requests/s (measured, simulated, ratio). It checks:

1. achieved requests/s within 10% at every stage, and the saturation throughput (the largest
   achieved rate) within 10%;
2. at every stage below the knee (measured achieved >= 97% of requested): TTFT p50 within
   20%, E2E p50 within 15%, normalised TPOT p50 within 15%.

Prints the JSON (or writes it to ``--json``) and a table; ``--plot`` writes TTFT p90 against
the requested rate, measured and simulated, one colour per configuration.

    headroom bench sim-vs-measured --measured ../shared/measured/inference-perf-h100-llama3-8b \
        [--run NAME=VLLM_ARGS ...] [--profile h100-llama3-8b] [--seed 0] [--out DIR] \
        [--json OUT] [--plot docs/sim_vs_measured_ttft_p90.png]

Without ``--run``, the directory's two shipped configurations are run with the flags its
README lists (vLLM 0.11.0, Llama-3.1-8B, one H100).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from services.simulator.inference_perf.cli import measured_stages, simulate, stage_rows
from services.simulator.inference_perf.config import read_config
from services.simulator.profiles import PROFILES
from services.simulator.vllm_args import DEFAULT_VLLM_VERSION, resolve_named

COMMON = "--gpu_memory_utilization=0.9 --max-model-len=512 --max-num-seqs=128"
SHIPPED = {
    "baseline": f"{COMMON} --no-enable-prefix-caching --no-enable-chunked-prefill",
    "chunking_and_prefix_caching": f"{COMMON} --enable-prefix-caching --enable-chunked-prefill",
}
KNEE = 0.97  # a stage is below the knee when it achieved >= 97% of the requested rate
LIMITS = {"achieved_rps": 0.10, "saturation_rps": 0.10, "ttft_p50_ms": 0.20,
          "e2e_p50_ms": 0.15, "ntpot_p50_ms": 0.15}  # fmt: skip
METRICS = ("ttft_p50_ms", "ttft_p90_ms", "e2e_p50_ms", "ntpot_p50_ms", "achieved_rps")
BELOW_KNEE = ("ttft_p50_ms", "e2e_p50_ms", "ntpot_p50_ms")


def measured_rows(directory: str | Path) -> list[dict]:
    rows = []
    for i, s in enumerate(measured_stages(directory)):
        lat = s["successes"]["latency"]
        rows.append({
            "stage": i,
            "requested_rps": s["load_summary"]["requested_rate"],
            "achieved_rps": s["load_summary"]["achieved_rate"],
            "ttft_p50_ms": lat["time_to_first_token"]["median"] * 1000.0,
            "ttft_p90_ms": lat["time_to_first_token"]["p90"] * 1000.0,
            "e2e_p50_ms": lat["request_latency"]["median"] * 1000.0,
            "ntpot_p50_ms": lat["normalized_time_per_output_token"]["median"] * 1000.0,
        })  # fmt: skip
    return rows


def compare(measured: Sequence[dict], simulated: Sequence[dict]) -> dict:
    """Per-stage comparison and the done-means checks for one configuration."""
    if len(measured) != len(simulated):
        raise ValueError(f"{len(measured)} measured stages, {len(simulated)} simulated")
    stages, failures = [], []
    for m, s in zip(measured, simulated, strict=True):
        below = m["achieved_rps"] >= KNEE * m["requested_rps"]
        row = {"stage": m["stage"], "requested_rps": m["requested_rps"], "below_knee": below}
        for k in METRICS:
            ratio = s[k] / m[k] if m[k] else None
            row[k] = {"measured": round(m[k], 3), "simulated": round(s[k], 3),
                      "ratio": None if ratio is None else round(ratio, 4)}  # fmt: skip
        checked = ("achieved_rps", *BELOW_KNEE) if below else ("achieved_rps",)
        for k in checked:
            ratio = row[k]["ratio"]
            if ratio is None or abs(ratio - 1) > LIMITS[k]:
                failures.append(f"stage {m['stage']} {k}: ratio {ratio} (limit ±{LIMITS[k]:.0%})")
        stages.append(row)
    sat_m = max(m["achieved_rps"] for m in measured)
    sat_s = max(s["achieved_rps"] for s in simulated)
    sat_ratio = sat_s / sat_m
    if abs(sat_ratio - 1) > LIMITS["saturation_rps"]:
        failures.append(f"saturation: ratio {sat_ratio:.3f} (limit ±10%)")
    return {
        "stages": stages,
        "saturation_rps": {
            "measured": round(sat_m, 3),
            "simulated": round(sat_s, 3),
            "ratio": round(sat_ratio, 4),
        },
        "failures": failures,
        "ok": not failures,
    }


def format_table(name: str, result: dict) -> str:
    head = f"{name}: measured / simulated (ratio)"
    cols = ("TTFT p50 ms", "TTFT p90 ms", "E2E p50 ms", "NTPOT p50 ms", "achieved req/s")
    lines = [head, "| stage | req/s | " + " | ".join(cols) + " |",
             "|---:|---:|" + "---:|" * len(cols)]  # fmt: skip
    for r in result["stages"]:
        cells = []
        for k in METRICS:
            c = r[k]
            spec = ".2f" if k == "ntpot_p50_ms" else ".1f"
            cells.append(f"{c['measured']:{spec}} / {c['simulated']:{spec}} ({c['ratio']:.2f})")
        knee = "" if r["below_knee"] else " *"
        lines.append(
            f"| {r['stage']}{knee} | {r['requested_rps']:.2f} | " + " | ".join(cells) + " |"
        )
    sat = result["saturation_rps"]
    lines.append(f"saturation (largest achieved req/s): {sat['measured']:.1f} / "
                 f"{sat['simulated']:.1f} ({sat['ratio']:.3f}); * = above the knee")  # fmt: skip
    lines.append("checks: " + ("all pass" if result["ok"] else "; ".join(result["failures"])))
    return "\n".join(lines)


def plot(results: dict[str, dict], path: str | Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, res) in enumerate(results.items()):
        colour = f"C{i}"
        x = [r["requested_rps"] for r in res["stages"]]
        ax.plot(x, [r["ttft_p90_ms"]["measured"] for r in res["stages"]], "o-", color=colour,
                label=f"{name}: measured")  # fmt: skip
        ax.plot(x, [r["ttft_p90_ms"]["simulated"] for r in res["stages"]], "s--", color=colour,
                label=f"{name}: simulated", alpha=0.8)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("requested rate (requests/s)")
    ax.set_ylabel("TTFT p90 (ms, log)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _run_arg(v: str) -> tuple[str, str]:
    name, sep, args = v.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VLLM_ARGS, got {v!r}")
    return name.strip(), args.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="headroom bench sim-vs-measured", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--measured", required=True, help="directory with config.yaml and one "
                   "sub-directory of stage files per configuration")  # fmt: skip
    p.add_argument("--run", type=_run_arg, action="append", default=[], metavar="NAME=ARGS",
                   help="a configuration (sub-directory NAME) and its vLLM flags; repeatable "
                   "(default: the two shipped configurations)")  # fmt: skip
    p.add_argument("--config", help="inference-perf config (default: MEASURED/config.yaml)")
    p.add_argument("--profile", default="h100-llama3-8b", choices=sorted(PROFILES))
    p.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the simulated lifecycle reports under OUT/NAME/")
    p.add_argument("--json", dest="json_out", help="write the JSON result here")
    p.add_argument("--plot", help="write the TTFT p90 plot here (PNG)")
    return p


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    base = Path(args.measured)
    runs = dict(args.run) if args.run else dict(SHIPPED)
    started = time.perf_counter()
    out: dict = {"measured": str(base), "profile": args.profile, "seed": args.seed,
                 "vllm_version": args.vllm_version, "configurations": {}}  # fmt: skip
    try:
        config = read_config(args.config or base / "config.yaml")
        for name, vargs in runs.items():
            d = base / name
            resolved = resolve_named(args.profile, vargs, args.vllm_version)
            t0 = time.perf_counter()
            _, reports, meta = simulate(
                config, resolved, seed=args.seed, rates_from=str(d), prompt_len_from=str(d)
            )
            if args.out:
                from services.simulator.inference_perf.cli import write_reports

                write_reports(Path(args.out) / name, reports, meta)
            result = compare(measured_rows(d), stage_rows(reports))
            result.update(vllm_args=vargs, engine=meta["engine"], notes=meta["notes"],
                          prefix_cache=meta["prefix_cache"], probe=meta["probe"],
                          wall_seconds=round(time.perf_counter() - t0, 1))  # fmt: skip
            out["configurations"][name] = result
    except (ValueError, OSError) as e:
        print(f"headroom bench sim-vs-measured: {e}", file=sys.stderr)
        return 2
    out["ok"] = all(r["ok"] for r in out["configurations"].values())
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(out, indent=1)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    else:
        print(text)
    for name, res in out["configurations"].items():
        print(format_table(name, res), file=sys.stderr)
        for note in res["notes"]:
            print(f"  note: {note}", file=sys.stderr)
    if args.plot:
        title = f"TTFT p90 vs rate: measured vLLM vs {args.profile} (virtual time)"
        print(f"wrote {plot(out['configurations'], args.plot, title)}", file=sys.stderr)
    return 0 if out["ok"] else 1
