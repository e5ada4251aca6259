"""`headroom lab compare --suite NAME`: every workload of a suite over the load ladder.

For each workload (:mod:`bench.lab.suite`): the generated ones are written as Mooncake
jsonl files into ``OUT/workloads/`` (with their spec beside), the real-trace windows are
read in place with the lab's offset and limit. Then, per workload: its characterisation
(:mod:`bench.lab.characterise`), its own saturation estimate (:mod:`bench.lab.saturation`),
and its SLOs by one rule from its shape (:func:`slo_rule`). Each (workload, load, policy)
is one lab run without SLO headers and, with ``slo="both"``, one with them.

Policies whose routing does not read SLO headers (:data:`SLO_BLIND`; tests/unit/
test_lab_suite.py checks that their decisions are identical with and without the headers)
are run once: their attainment and goodput with headers are computed from the same
requests (``slo_from_headerless`` marks those reports). So is the rollout reference
(:data:`HEADERLESS`), which refuses SLO headers: its attainment is that of its headerless run.

``jobs`` > 1 runs the lab runs in that many processes; the results do not depend on it (each
run is deterministic for its seed, and results are ordered by workload, load, policy).
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

from bench.lab.characterise import characterise
from bench.lab.compare import check_ladder
from bench.lab.config import LabConfig
from bench.lab.oracle import GREEDY_ORACLES
from bench.lab.report import summarize
from bench.lab.rollout import ROLLOUT_POLICIES
from bench.lab.run import load_lab_trace, run_lab
from bench.lab.saturation import estimate_saturation
from bench.lab.suite import suite
from bench.lab.workloads import TraceSlice, WorkloadSpec
from bench.traces import BLOCK_TOKENS
from services.simulator.engine import Engine
from services.simulator.profiles import Profile
from shared.tokenizer import synth_tokens

# profiles whose decisions SLO headers do not change (fenced by a test); the greedy TTFT
# oracle (bench/lab/oracle.py) reads the engines, not the headers
SLO_BLIND = frozenset(
    {
        "round-robin",
        "least-request",
        "gie-default",
        "prefix-aware",
        "cache-aware",
        *GREEDY_ORACLES,
    }
)
# policies the suite runs only without SLO headers, their attainment read from those requests
# (slo_from_headerless): the SLO-blind ones, and the rollout reference, which refuses headers
# (its copies of the lab carry no learner, bench/lab/rollout.py)
HEADERLESS = SLO_BLIND | frozenset(ROLLOUT_POLICIES)
SLO_MODES = ("both", "on", "off")

# The SLO rule (the same for every workload; not tuned per workload):
# TTFT SLO = max(TTFT_FLOOR_MS, TTFT_FACTOR x the idle-pod TTFT of a prompt of the workload's
#            median length less its block-repeat share (what a warm prefix cache leaves to
#            prefill)), rounded up to 50 ms;
# TPOT SLO = max(TPOT_FLOOR_MS, TPOT_FACTOR x the idle-pod TPOT at the median prompt),
#            rounded up to 5 ms.
TTFT_FACTOR, TTFT_FLOOR_MS = 6.0, 300.0
TPOT_FACTOR, TPOT_FLOOR_MS = 8.0, 30.0


def idle_latency_ms(profile: Profile, prompt_tokens: int, output_tokens: int = 64):
    """(TTFT, TPOT) in ms of one request alone on an idle pod, without cache hits."""
    n = max(1, min(int(prompt_tokens), profile.max_model_len - output_tokens - 1))
    engine = Engine(profile, 0)
    engine.submit("idle", synth_tokens(n, 1), output_tokens, 0.0)
    now, first = 0.0, None
    while engine.has_work():
        out = engine.step(now)
        now += out.duration_s
        if first is None and any(ev.index == 0 for ev in out.events):
            first = now
    assert first is not None
    return first * 1000.0, (now - first) * 1000.0 / max(1, output_tokens - 1)


def ttft_floor_ms(requests: Sequence, profile: Profile) -> dict[str, float]:
    """TTFT percentiles (ms: p50, p90, p99) no router can beat on these requests: each
    request alone on an idle pod whose prefix cache holds every block an earlier request of
    the workload brought (its prompt's leading block ids seen before are cached, 512 tokens
    each; a trace without block ids has no cache hits). The idle TTFT is the engine's, read
    on a log grid of prompt lengths and interpolated."""
    import numpy as np

    seen: set[int] = set()
    uncached = []
    for r in requests:
        cached = 0
        for h in r.hash_ids:
            if h not in seen:
                break
            cached += 1
        seen.update(r.hash_ids)
        uncached.append(max(1, r.input_tokens - BLOCK_TOKENS * cached))
    hi = max(uncached)
    grid = sorted({int(x) for x in np.geomspace(1, max(2, hi), 48)} | {hi})
    ttft = [idle_latency_ms(profile, n, 2)[0] for n in grid]
    q = np.percentile(np.interp(uncached, grid, ttft), [50, 90, 99])
    return {k: round(float(v), 1) for k, v in zip(("p50", "p90", "p99"), q, strict=True)}


def _round_up(x: float, step: float) -> float:
    return float(math.ceil(x / step) * step)


def slo_rule(c: dict, profile: Profile) -> dict[str, float]:
    """The workload's TTFT and TPOT SLOs from its characterisation ``c``."""
    p50 = c["prompt"]["p50"]
    uncached = max(1.0, p50 * (1.0 - (c["block_repeat"] or 0.0)))
    ttft, _ = idle_latency_ms(profile, round(uncached))
    _, tpot = idle_latency_ms(profile, round(p50))
    return {
        "ttft_ms": max(TTFT_FLOOR_MS, _round_up(TTFT_FACTOR * ttft, 50.0)),
        "tpot_ms": max(TPOT_FLOOR_MS, _round_up(TPOT_FACTOR * tpot, 5.0)),
    }


@dataclass(frozen=True)
class Workload:
    """A suite entry ready to run: its trace file and slice, and what it looks like."""

    name: str
    split: str
    family: str
    trace: str
    offset: int
    limit: int | None
    spec: dict
    characterisation: dict | None = None
    saturation: dict | None = None
    slo: dict | None = None
    floor: dict | None = None  # ttft_floor_ms: TTFT percentiles no router can beat

    def config(self, base: LabConfig) -> LabConfig:
        return replace(base, trace=self.trace, offset=self.offset, limit=self.limit,
                       trace_format=None)  # fmt: skip


def materialise(split: str, entry, work_dir: Path) -> Workload:
    if isinstance(entry, WorkloadSpec):
        path = entry.write(work_dir / f"{entry.name}.jsonl")
        return Workload(entry.name, split, entry.family, str(path), 0, None, entry.to_dict())
    assert isinstance(entry, TraceSlice)
    path = entry.path()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: real trace missing (set HEADROOM_TRACES_DIR or put the traces in "
            "../shared/traces beside the checkout)"
        )
    spec = entry.to_dict()
    return Workload(entry.name, split, "trace", str(path), spec["offset"], spec["limit"], spec)


def prepare(workload: Workload, base: LabConfig) -> Workload:
    """Characterisation, saturation estimate, SLOs and TTFT floor of one workload."""
    cfg = workload.config(replace(base, rate_scale=1.0))
    trace = load_lab_trace(cfg)
    c = characterise(trace.requests)
    profile = cfg.engine_profile()
    sat = estimate_saturation(trace.requests, profile, cfg.pods, seed=cfg.seed)
    return replace(workload, characterisation=c, saturation=sat.to_dict(),
                   slo=slo_rule(c, profile), floor=ttft_floor_ms(trace.requests, profile))  # fmt: skip


def with_floor(workload: Workload, base: LabConfig) -> Workload:
    """``workload`` with its TTFT floor (computed when a run prepared before it had none)."""
    if workload.floor is not None:
        return workload
    cfg = workload.config(replace(base, rate_scale=1.0))
    floor = ttft_floor_ms(load_lab_trace(cfg).requests, cfg.engine_profile())
    return replace(workload, floor=floor)


@dataclass(frozen=True)
class Task:
    workload: Workload
    base: LabConfig
    policy: str
    load: float
    headers: bool  # SLO headers sent
    derive_slo: bool  # also report attainment with the workload's SLOs from these requests
    keep_plain: bool = True  # with derive_slo: keep the report without SLOs too


def rate_scale(workload: Workload, load: float) -> float:
    s = workload.saturation
    assert s is not None
    return load * s["cluster_rps"] / s["trace_rps"]


def tasks_for(
    workloads: Sequence[Workload], base: LabConfig, policies: Sequence[str],
    loads: Sequence[float], slo: str,
) -> list[Task]:  # fmt: skip
    if slo not in SLO_MODES:
        raise ValueError(f"slo must be one of {SLO_MODES}")
    out = []
    for w in workloads:
        for load in loads:
            for policy in policies:
                blind = policy in HEADERLESS
                if slo == "off":
                    out.append(Task(w, base, policy, load, False, False))
                elif slo == "on":
                    out.append(Task(w, base, policy, load, not blind, blind, keep_plain=not blind))
                else:
                    out.append(Task(w, base, policy, load, False, blind))
                    if not blind:
                        out.append(Task(w, base, policy, load, True, False))
    return out


def run_task(task: Task) -> list[dict]:
    """One lab run; with ``derive_slo`` also the same run's report read with the SLOs."""
    w = task.workload
    assert w.slo is not None
    scale = rate_scale(w, task.load)
    cfg = replace(w.config(task.base), policy=task.policy, rate_scale=scale,
                  slo_ttft_ms=w.slo["ttft_ms"] if task.headers else None,
                  slo_tpot_ms=w.slo["tpot_ms"] if task.headers else None)  # fmt: skip
    records: list = []
    report = run_lab(cfg, records_out=records)
    meta = {"workload": w.name, "split": w.split, "family": w.family, "load": task.load}
    out = [{**meta, **report, "slo_headers": task.headers, "slo_from_headerless": False}]
    if task.derive_slo:
        derived = summarize(records, slo_ttft_ms=w.slo["ttft_ms"], slo_tpot_ms=w.slo["tpot_ms"])
        out.append({**out[0], "slo": derived["slo"], "slo_headers": True,
                    "slo_from_headerless": True})  # fmt: skip
        if not task.keep_plain:
            del out[0]
    return out


def _pool(jobs: int):
    return ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))


def _map(fn, items: Sequence, jobs: int, on_result: Callable | None = None) -> list:
    """``[fn(x) for x in items]``, in ``jobs`` processes when > 1, in order."""
    if jobs <= 1 or len(items) <= 1:
        out = []
        for x in items:
            out.append(fn(x))
            if on_result is not None:
                on_result(out[-1])
        return out
    pool = _pool(min(jobs, len(items)))
    try:
        futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
        out: list = [None] * len(items)
        for f in as_completed(futures):
            out[futures[f]] = f.result()
            if on_result is not None:
                on_result(out[futures[f]])
    except BaseException:  # a failed run or ^C: drop the queued runs, do not wait for them
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return out


def _prepare_one(args: tuple[Workload, LabConfig]) -> Workload:
    return prepare(*args)


def commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_suite(
    name: str,
    base: LabConfig,
    policies: Sequence[str],
    loads: Sequence[float],
    out_dir: Path,
    *,
    slo: str = "both",
    jobs: int = 1,
    full_traces: bool = False,
    on_prepared: Callable[[Workload], None] | None = None,
    on_done: Callable[[list[dict]], None] | None = None,
    seeds: Sequence[int] | None = None,
    only: Sequence[str] | None = None,
) -> tuple[list[Workload], list[dict]]:
    """Prepare every workload of suite ``name`` (``only``: just those named) and run the
    ladder; returns the workloads and every run's report (ordered by seed, workload, load,
    policy, headers). ``seeds``: run the ladder once per lab seed (default: ``base.seed``
    alone); the workloads, their rates and SLOs are prepared once, with the first seed, so
    the seeds differ only in the engines' noise and the pickers' tie-breaks. Each workload's
    rate and SLOs are its own: a run of some workloads repeats the whole suite's runs of them."""
    seeds = list(seeds) if seeds else [base.seed]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds repeat: {seeds}")
    base = replace(base, seed=seeds[0])
    check_ladder(base, policies, loads)
    if slo not in SLO_MODES:
        raise ValueError(f"slo must be one of {SLO_MODES}")
    work_dir = out_dir / "workloads"
    entries = suite(name, full_traces=full_traces, only=only)
    raw = [materialise(split, e, work_dir) for split, e in entries]
    workloads = _map(_prepare_one, [(w, base) for w in raw], jobs, on_prepared)
    tasks = [t for seed in seeds
             for t in tasks_for(workloads, replace(base, seed=seed), policies, loads, slo)]  # fmt: skip
    # cheapest workloads first (virtual seconds to simulate: requests / saturation rate), so a
    # suite cut short has whole workloads; the results keep the suite's order
    cost = {w.name: w.spec.get("requests", w.limit or 0) / w.saturation["cluster_rps"]
            for w in workloads if w.saturation}  # fmt: skip
    order = sorted(range(len(tasks)), key=lambda i: (cost[tasks[i].workload.name], i))
    done = _map(run_task, [tasks[i] for i in order], jobs, on_done)
    by_task = dict(zip(order, done, strict=True))
    results = [r for i in range(len(tasks)) for r in by_task[i]]
    return workloads, results


def write_suite_outputs(
    name: str, base: LabConfig, loads: Sequence[float], slo: str,
    workloads: Sequence[Workload], results: Sequence[dict], out_dir: Path,
    commit_id: str | None = None,
) -> tuple[list[Path], dict]:  # fmt: skip
    """``results.json`` (every run's report), ``summary.json``, ``summary.md`` and the plots
    (:func:`bench.lab.summary.plot`); ``commit_id``: the checkout's commit when the runs
    started (default: now). Returns the paths written and the summary."""
    import json

    from bench.lab.summary import plot, summarise, summary_markdown

    meta = {"suite": name, "pods": base.pods, "profile": base.profile, "seed": base.seed,
            "streaming": base.streaming, "loads": list(loads), "slo": slo,
            "commit": commit_id or commit()}  # fmt: skip
    ws = [
        {"name": w.name, "split": w.split, "family": w.family, "spec": w.spec,
         "characterisation": w.characterisation, "saturation": w.saturation, "slo": w.slo,
         "floor": w.floor}
        for w in workloads
    ]  # fmt: skip
    s = summarise(results, ws, meta)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "summary.json", out_dir / "summary.md"]
    paths[0].write_text(json.dumps(list(results), indent=1) + "\n")
    paths[1].write_text(json.dumps(s, indent=1) + "\n")
    paths[2].write_text(summary_markdown(s))
    return paths + plot(s, out_dir), s


def write_outputs(
    name: str, base: LabConfig, loads: Sequence[float], slo: str,
    workloads: Sequence[Workload], results: Sequence[dict], out_dir: Path,
    commit_id: str | None = None,
) -> list[Path]:  # fmt: skip
    """:func:`write_suite_outputs` for a suite run at one seed; for several seeds, one
    ``seed-S/`` directory each (its own summary) plus ``seeds.json`` / ``seeds.md``
    (:func:`bench.lab.summary.across_seeds`: done-means 1 per seed and which cells fail on
    how many seeds), written when ``headroom`` ran (done-means 1 is its)."""
    import json

    from bench.lab.summary import across_seeds, seeds_markdown

    seeds = list(dict.fromkeys(r["seed"] for r in results))
    if len(seeds) <= 1:
        b = replace(base, seed=seeds[0]) if seeds else base
        return write_suite_outputs(name, b, loads, slo, workloads, results, out_dir, commit_id)[0]
    paths: list[Path] = []
    per_seed: dict[int, dict] = {}
    for seed in seeds:
        rs = [r for r in results if r["seed"] == seed]
        written, s = write_suite_outputs(name, replace(base, seed=seed), loads, slo, workloads,
                                         rs, out_dir / f"seed-{seed}", commit_id)  # fmt: skip
        paths += written
        per_seed[seed] = s["done_means_1"]
    if any(dm is None for dm in per_seed.values()):
        return paths  # done-means 1 is headroom's: without it there is nothing to sum
    a = {"suite": name, "loads": list(loads), "slo": slo, "commit": commit_id or commit(),
         **across_seeds(per_seed)}  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "seeds.json").write_text(json.dumps(a, indent=1) + "\n")
    (out_dir / "seeds.md").write_text(seeds_markdown(a, name))
    return [*paths, out_dir / "seeds.json", out_dir / "seeds.md"]


def read_workloads(out_dir: Path) -> list[Workload]:
    """The prepared workloads a ``lab compare --suite`` run wrote to ``out_dir`` (rates,
    SLOs, floors: its ``workloads.partial.jsonl``)."""
    import json

    path = out_dir / "workloads.partial.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the prepared workloads are missing")
    return [Workload(**json.loads(line)) for line in path.read_text().splitlines() if line]


def read_results(out_dir: Path) -> list[dict]:
    """The runs a suite directory holds: ``results.json`` (a finished suite) or else
    ``results.partial.jsonl`` (one cut short)."""
    import json

    results_path = out_dir / "results.json"
    if results_path.is_file():
        results = json.loads(results_path.read_text())
    else:
        partial = out_dir / "results.partial.jsonl"
        if not partial.is_file():
            raise FileNotFoundError(f"{out_dir}: neither results.json nor results.partial.jsonl")
        results = [json.loads(line) for line in partial.read_text().splitlines() if line]
    if not results:
        raise ValueError(f"{out_dir}: no finished runs")
    return results


def resummarise(out_dir: Path, name: str | None = None, commit_id: str | None = None) -> list[Path]:
    """Re-write the summary of a suite directory from what its runs left: ``results.json``
    (a finished suite) or else ``results.partial.jsonl`` (one cut short), and the prepared
    workloads of ``workloads.partial.jsonl``; TTFT floors the preparation did not compute
    are computed here. ``name``: the suite's name for the title (default: summary.json's,
    else the directory's name); ``commit_id``: the commit the runs ran at (default:
    summary.json's, else unknown: a suite cut short wrote none)."""
    import json

    results = read_results(out_dir)
    prepared = read_workloads(out_dir)
    ran = {r["workload"] for r in results}
    first = results[0]
    base = LabConfig(trace="-", pods=first["pods"], profile=first["profile"],
                     vllm_args=first.get("vllm_args"), seed=first["seed"],
                     streaming=first["streaming"])  # fmt: skip
    workloads = [with_floor(w, base) for w in prepared if w.name in ran]
    order = {w.name: i for i, w in enumerate(workloads)}
    results = sorted(results, key=lambda r: order.get(r["workload"], len(order)))
    meta: dict = {}
    for f in (out_dir / "summary.json", out_dir / "seeds.json"):  # one seed / several
        if f.is_file():
            meta = json.loads(f.read_text())
            break
    loads = meta.get("loads") or sorted({r["load"] for r in results})
    slo = meta.get("slo") or "both"
    return write_outputs(name or meta.get("suite") or out_dir.name, base, loads, slo,
                         workloads, results, out_dir,
                         commit_id or meta.get("commit") or "unknown")  # fmt: skip


def run_summary_cli(argv: list[str]) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="headroom lab summary",
        description="Re-write a suite directory's summary.md / summary.json / plots from its "
        "runs (results.json, or results.partial.jsonl of a suite cut short).",
    )
    p.add_argument("dir", help="the --out directory of `headroom lab compare --suite`")
    p.add_argument("--suite", help="the suite's name for the title")
    p.add_argument("--commit", help="the commit the runs ran at (default: summary.json's)")
    args = p.parse_args(argv)
    try:
        paths = resummarise(Path(args.dir), args.suite, args.commit)
    except (OSError, ValueError, KeyError) as e:
        print(f"headroom lab summary: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _versus_dir(arg: str) -> tuple[Path, dict[str, str] | None]:
    """``DIR`` or ``DIR:POLICY[,POLICY...]`` (an existing directory named with a colon is
    taken whole); ``POLICY=NAME`` takes that policy's runs under another name (the same
    profile run twice, e.g. at two commits or with a perturbed lab, compared as two). Returns
    the directory and {policy: name to take it as}, or None for every policy as it is."""
    head, sep, tail = arg.rpartition(":")
    if not sep or Path(arg).is_dir() or not head:
        return Path(arg), None
    only: dict[str, str] = {}
    for item in (x.strip() for x in tail.split(",")):
        if not item:
            continue
        policy, eq, name = (x.strip() for x in item.partition("="))
        if not policy or (eq and not name):
            raise ValueError(f"{arg}: {item!r} is not POLICY or POLICY=NAME")
        only[policy] = name or policy
    if not only:
        raise ValueError(f"{arg}: no policy after the colon")
    return Path(head), only


def run_versus_cli(argv: list[str]) -> int:
    """``headroom lab versus DIR [DIR ...] --reference POLICY``: the runs of several suite
    directories (one suite: baselines in one, candidates in others) merged, and each
    candidate against the reference (summary.versus_reference); runs of several lab seeds are
    scored per seed and pooled (every seed's cells as cells of one suite)."""
    import argparse
    import json
    import sys

    from bench.lab.summary import (
        cells,
        versus_cells,
        versus_cells_markdown,
        versus_failures_markdown,
        versus_reference,
        versus_reference_markdown,
    )

    p = argparse.ArgumentParser(
        prog="headroom lab versus",
        description="Merge the runs of suite directories (one suite; e.g. the "
        "baselines and the shipped profile in one, candidate profiles in others) and score "
        "each candidate against a reference profile: attainable failing checks of issue 18's "
        "done-means 1, geometric means of TTFT p90 / p99, TPOT p90, E2E p90 and TTFT p99 "
        "with SLO headers over the "
        "reference's, and the mean SLO attainment difference. Runs of several lab seeds "
        "(e.g. DIR/seed-1 DIR/seed-2 of `--seeds 1,2`) are scored per seed and pooled.",
    )
    p.add_argument("dirs", nargs="+", help="--out directories of `headroom lab compare --suite`; "
                   "DIR:POLICY[,POLICY...] takes only those policies' runs from DIR (e.g. the "
                   "baselines of a run whose other policies another directory replaces); "
                   "POLICY=NAME takes one under another name (the same profile run twice)")  # fmt: skip
    p.add_argument("--reference", default="headroom", help="the profile to compare against")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--failures",
        action="store_true",
        help="also each policy's failing "
        "checks of done-means 1, one line per check (in --json always: each "
        "policy's `failures`)",
    )
    p.add_argument("--cells", action="store_true", help="also each cell both ran: TTFT p90 "
                   "and p99, TPOT p90, E2E p90 and attainment, the reference's and the candidate's "
                   "(with --json: {policies, cells})")  # fmt: skip
    args = p.parse_args(argv)
    try:
        results: list[dict] = []
        floors: dict[str, dict] = {}
        seen: dict[tuple, Path] = {}
        rates: dict[tuple, tuple[float, Path]] = {}
        for arg in args.dirs:
            d, only = _versus_dir(arg)
            for r in read_results(d):
                if only is not None:
                    if r["policy"] not in only:
                        continue
                    r = dict(r, policy=only[r["policy"]])
                seed = r.get("seed")
                key = (r["workload"], r["load"], r["policy"], bool(r.get("slo_headers")), seed)
                if seen.setdefault(key, d) != d:
                    raise ValueError(f"{key[2]} ran {key[0]} at load {key[1]:g} in both "
                                     f"{seen[key]} and {d}: give each policy one directory")  # fmt: skip
                # a suite prepares its workloads' rates with its first seed: the same seed's
                # runs from `--seeds 0,1,2` and `--seeds 1,2` ran at different rates
                cell = (r["workload"], r["load"], seed)
                rate, where = rates.setdefault(cell, (r.get("rate_scale"), d))
                if r.get("rate_scale") != rate:
                    raise ValueError(f"{cell[0]} at load {cell[1]:g} ran at rate scale "
                                     f"{rate} in {where} and {r.get('rate_scale')} in {d}: "
                                     "compare suites prepared alike (the same first seed)")  # fmt: skip
                results.append(r)
            summary = d / "summary.json"
            if summary.is_file():
                for w in json.loads(summary.read_text()).get("workloads", []):
                    if w.get("floor"):
                        floors.setdefault(w["name"], w["floor"])
        seeds = sorted({r.get("seed") for r in results}, key=lambda x: (x is None, x))
        per_seed: dict = {}
        if len(seeds) > 1:
            # each seed on its own, then every seed's cells as cells of one suite (a
            # workload at a load per seed): checks summed, geomeans over all of them
            for sd in seeds:
                cs_s = cells([r for r in results if r.get("seed") == sd])
                per_seed[sd] = versus_reference(cs_s, args.reference, floors=floors)
            results = [dict(r, workload=f"{r['workload']} (seed {r.get('seed')})")
                       for r in results]  # fmt: skip
            floors = {f"{w} (seed {sd})": f for w, f in floors.items() for sd in seeds}
        cs = cells(results)
        rows = versus_reference(cs, args.reference, floors=floors)
        per_cell = versus_cells(cs, args.reference) if args.cells else None
    except (OSError, ValueError, KeyError) as e:
        print(f"headroom lab versus: {e}", file=sys.stderr)
        return 2
    if args.json:
        out: object = rows if per_cell is None else {"policies": rows, "cells": per_cell}
        if per_seed:
            out = {"seeds": {str(sd): r for sd, r in per_seed.items()}, "pooled": rows,
                   **({"cells": per_cell} if per_cell is not None else {})}  # fmt: skip
        print(json.dumps(out, indent=1))
    else:
        for sd, r in per_seed.items():
            print(f"seed {sd}:\n\n" + versus_reference_markdown(r, args.reference) + "\n", end="")
        if per_seed:
            print(f"seeds {', '.join(str(x) for x in seeds)} pooled (checks summed, geomeans "
                  "over every seed's cells):\n")  # fmt: skip
        print(versus_reference_markdown(rows, args.reference), end="")
        if args.failures:
            print("\n" + versus_failures_markdown(rows), end="")
        if per_cell is not None:
            print("\n" + versus_cells_markdown(per_cell, args.reference), end="")
    return 0
