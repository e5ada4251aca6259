"""`headroom lab compare`: a load ladder for several policies, with a table and plots.

Load is a fraction of the cluster's estimated saturation throughput for the trace
(:mod:`bench.lab.saturation`); each (policy, load) pair is one lab run with the rate scale of
that load. Writes into the output directory:

- ``results.json``: a list of lab reports, each with an added ``load`` field;
- ``table.md``: one row per (load, policy);
- ``ttft_p90.png`` and ``slo_attainment.png`` (when SLOs were given): one line per policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from bench.lab.config import LabConfig
from bench.lab.oracle import check_policies
from bench.lab.run import load_lab_trace, run_lab
from bench.lab.saturation import Saturation, estimate_saturation
from services.gateway.scheduling.config import load_config


def saturation_for(base: LabConfig) -> Saturation:
    native = load_lab_trace(replace(base, rate_scale=1.0))
    profiles = base.pod_profiles()
    pool = profiles[0] if len(set(profiles)) == 1 else profiles
    return estimate_saturation(native.requests, pool, base.pods, seed=base.seed)


def run_compare(
    base: LabConfig,
    policies: Sequence[str],
    loads: Sequence[float],
    *,
    saturation: Saturation | None = None,
    on_start: Callable[[str, float, float], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_done: Callable[[dict], None] | None = None,
) -> tuple[Saturation, list[dict]]:
    """Run every (load, policy) pair; ``base.policy`` and ``base.rate_scale`` are ignored."""
    scheduling = check_ladder(base, policies, loads)
    sat = saturation or saturation_for(base)
    results = []
    for load in loads:
        scale = sat.rate_scale(load)
        trace = load_lab_trace(replace(base, rate_scale=scale))
        for policy in policies:
            if on_start is not None:
                on_start(policy, load, scale)
            cfg = replace(base, policy=policy, rate_scale=scale)
            report = run_lab(cfg, trace=trace, scheduling=scheduling, progress=on_progress)
            report = {"load": load, **report, "saturation": sat.to_dict()}
            results.append(report)
            if on_done is not None:
                on_done(report)
    return sat, results


def check_ladder(base: LabConfig, policies: Sequence[str], loads: Sequence[float]):
    """The scheduling config of ``base`` after checking a ladder: at least one policy and one
    load, every load > 0, every policy a profile of that config or a lab-only reference
    policy (bench/lab/oracle.py; ValueError otherwise)."""
    if not policies or not loads:
        raise ValueError("need at least one policy and one load")
    if any(not load > 0 for load in loads):
        raise ValueError("loads must be > 0")
    scheduling = load_config(base.profiles_path)
    check_policies(scheduling.profiles, policies)
    return scheduling


def fmt_cell(v: float | None, nd: int = 0, pct: bool = False) -> str:
    """A table cell: "–" for None, a percentage with ``pct``, else thousands-separated."""
    if v is None:
        return "–"
    if pct:
        return f"{100 * v:.1f}%"
    return f"{v:,.{nd}f}"


def table_markdown(results: Sequence[dict]) -> str:
    """One row per (load, policy)."""
    lines = [
        "| load | policy | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | TPOT p90 ms | E2E p90 ms "
        "| SLO attainment | goodput rps | throughput rps | prefix hit | TTFT MAPE | TPOT MAPE "
        "| wall s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        p = r.get("prediction") or {}
        lines.append(
            f"| {r['load']:g} | {r['policy']} | {fmt_cell(r['ttft_ms']['p50'])} "
            f"| {fmt_cell(r['ttft_ms']['p90'])} | {fmt_cell(r['tpot_ms']['p50'], 1)} "
            f"| {fmt_cell(r['tpot_ms']['p90'], 1)} | {fmt_cell(r['e2e_ms']['p90'])} "
            f"| {fmt_cell(r['slo']['attainment'], pct=True)} | {fmt_cell(r['slo']['goodput_rps'], 2)} "
            f"| {fmt_cell(r['throughput']['requests_per_s'], 2)} "
            f"| {fmt_cell(r['prefix_cache_hit_rate'], pct=True)} "
            f"| {fmt_cell(p.get('ttft_mape'), pct=True)} | {fmt_cell(p.get('tpot_mape'), pct=True)} "
            f"| {fmt_cell(r['wall_seconds'], 1)} |"
        )
    twins = [r for r in results if ((r.get("prediction") or {}).get("llmd_twin"))]
    if twins:  # --llmd-twin: both models over the same requests
        lines += [
            "",
            "| load | policy | requests scored | TTFT MAPE after | llm-d twin | ratio "
            "| TPOT MAPE after | llm-d twin | ratio |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in twins:
            t = r["prediction"]["llmd_twin"]
            lines.append(
                f"| {r['load']:g} | {r['policy']} | {t['requests']:,} "
                f"| {fmt_cell(t['ttft_mape_after'], pct=True)} "
                f"| {fmt_cell(t['twin_ttft_mape_after'], pct=True)} | {fmt_cell(t['ttft_ratio'], 2)} "
                f"| {fmt_cell(t['tpot_mape_after'], pct=True)} "
                f"| {fmt_cell(t['twin_tpot_mape_after'], pct=True)} | {fmt_cell(t['tpot_ratio'], 2)} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict], out_dir: Path, title: str) -> list[Path]:
    """TTFT p90 vs load and (with SLOs) SLO attainment vs load, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r["policy"] for r in results))
    charts = [("ttft_p90.png", "TTFT p90 (ms)", lambda r: r["ttft_ms"]["p90"], True)]
    if any(r["slo"]["attainment"] is not None for r in results):
        charts.append(
            ("slo_attainment.png", "SLO attainment", lambda r: r["slo"]["attainment"], False)
        )
    written = []
    for fname, ylabel, value, log in charts:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        for policy in policies:
            pts = sorted(
                (r["load"], value(r))
                for r in results
                if r["policy"] == policy and value(r) is not None
            )
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=policy)
        ax.set_xlabel("load (fraction of estimated saturation throughput)")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / fname
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def write_outputs(results: Sequence[dict], out_dir: Path, title: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "table.md"]
    paths[0].write_text(json.dumps(list(results), indent=1) + "\n")
    paths[1].write_text(table_markdown(results))
    return paths + plot(results, out_dir, title)
