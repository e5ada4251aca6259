"""Per-decision log of one suite cell: what the scheduler saw and chose for each request.

``headroom lab decisions DIR WORKLOAD LOAD`` re-runs one (workload, load) cell of a finished
``lab compare --suite`` directory (its prepared workloads, rates and SLOs) for one policy and
prints one JSON line per routed request: its index, arrival and routing time, prompt tokens,
the time it waited in the gateway's queue, its realised TTFT, the chosen pod, the scorer's
notes and, per candidate pod, ``[name, backlog_s, service_s, protected_decodes, score]``
(the pod view's estimates at the decision); per pod also its context in flight
(``context_tokens``) and KV use (``kv_usage``); and what the profile had learned by then
(``learned``: its latency-cost-scorer's damage weight, the pod view's budget share and
typical answer, the median learned decode slope over the pods). ``--timeline BINS`` prints
that log binned by decision order instead (bench/lab/state.py). This is how session 10
found that rag-a's loss was a cold start of the cost model, not the flow-control gate, and
session 29 when the decode price's copies happen (docs/benchmarks.md).

With ``--oracle`` each candidate also carries the noise-blind oracle's TTFT there (ms from
the decision: the pod forked, bench/lab/oracle.py) and each line the decision's ``regret_ms``
(the chosen pod's oracle TTFT minus the least); the run is the same, 10-20x slower. Session
12 read from it how much of a cell's TTFT p90 a better per-request choice could win.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.lab.config import LabConfig
from bench.lab.run import run_lab
from bench.lab.state import table, timeline
from bench.lab.suite_run import rate_scale, read_workloads
from services.gateway.scheduling.plugins.cost_scorer import LatencyCostScorer


def cell_config(
    suite_dir: Path, workload: str, load: float, base: LabConfig, *, slo: bool = False
) -> LabConfig:
    """The lab config of one cell of a suite directory (its prepared workloads);
    ``slo``: with the workload's SLO headers."""
    prepared = read_workloads(suite_dir)
    found = [w for w in prepared if w.name == workload]
    if not found:
        names = ", ".join(w.name for w in prepared)
        raise ValueError(f"no workload {workload!r} in {suite_dir} (there: {names})")
    w = found[0]
    cfg = replace(w.config(base), rate_scale=rate_scale(w, load))
    if slo and w.slo is not None:
        cfg = replace(cfg, slo_ttft_ms=w.slo["ttft_ms"], slo_tpot_ms=w.slo["tpot_ms"])
    return cfg


def _pod(c, service_s: float, score: float | None, oracle_ms: float | None = None) -> list:
    """[name, backlog_s, service_s, protected_decodes, score] of one candidate (and the
    oracle's TTFT in ms, with ``--oracle``)."""
    sc = None if score is None else round(score, 4)
    out = [c.name, round(c.backlog_s, 4), round(service_s, 4), c.protected_decodes, sc]
    return out if oracle_ms is None else [*out, round(oracle_ms, 3)]


def regret_ms(shadow: list[float | None], chosen: int | None) -> float | None:
    """The chosen candidate's oracle TTFT minus the least over the candidates (None when
    the chosen one has none)."""
    ok = [t for t in shadow if t is not None]
    if chosen is None or shadow[chosen] is None or not ok:
        return None
    return round(shadow[chosen] - min(ok), 3)


def _learned(scheduler, candidates) -> dict:
    """What the profile had learned at a decision (the module docstring's ``learned``)."""
    scorers = [p for p in scheduler.plugins if isinstance(p, LatencyCostScorer)]
    c = candidates[0]  # the pod view publishes these for every candidate alike
    return {
        "damage_weight": round(scorers[0].damage_weight(), 5) if scorers else None,
        "budget_share": None if c.budget_share is None else round(c.budget_share, 5),
        "typical_output_tokens": c.typical_output_tokens,
        "decode_s_per_token": float(np.median([x.decode_s_per_token for x in candidates])),
    }


def decision_log(
    config: LabConfig, first: int = 0, last: int | None = None, *, oracle: bool = False
) -> list[dict]:
    """Run the lab once; one dict per routed request with index in [first, last); with
    ``oracle``, each candidate's noise-blind oracle TTFT and the decision's regret."""
    out: dict[int, dict] = {}

    def on_decision(p, decision, now: float) -> None:
        i = p.request.index
        if i < first or (last is not None and i >= last):
            return
        rows = p.prep.rows
        service = rows.service_s or [0.0] * len(rows.candidates)
        chosen = decision.chosen
        shadow = p.shadow_ms if oracle else None
        shadow = shadow or [None] * len(rows.candidates)
        out[i] = {
            "index": i,
            "routed_s": round(now, 4),
            "prompt_tokens": len(p.tokens),
            "chosen": rows.candidates[chosen].name if chosen is not None else None,
            "notes": {k: str(v) for k, v in decision.notes.items()},
            "pods": [_pod(c, s, sc, o) for c, s, sc, o in zip(rows.candidates, service,
                                                               decision.scores, shadow, strict=True)],
        }  # fmt: skip
        if oracle:
            out[i]["regret_ms"] = regret_ms(shadow, chosen)
        cands = rows.candidates
        out[i]["context_tokens"] = [c.context_tokens for c in cands]
        out[i]["kv_usage"] = [round(c.load.kv_usage, 4) for c in cands]
        out[i]["learned"] = _learned(p.prep.scheduler, cands)

    records: list = []
    run_lab(config, records_out=records, on_decision=on_decision, shadow_oracle=oracle)
    for r in records:
        d = out.get(r.index)
        if d is None:
            continue
        d["arrival_s"] = round(r.arrival_s, 4)
        d["queued_s"] = None if r.dispatched_s is None else round(r.dispatched_s - r.arrival_s, 4)
        d["ttft_s"] = None if r.first_token_s is None else round(r.first_token_s - r.arrival_s, 4)
    return [out[i] for i in sorted(out)]


def run_decisions_cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="headroom lab decisions",
        description="Per-decision log (JSON lines) of one cell of a `lab compare --suite` "
        "directory: the pod view's estimates per candidate and the choice.",
    )
    p.add_argument("dir", help="the --out directory of `headroom lab compare --suite`")
    p.add_argument("workload")
    p.add_argument("load", type=float)
    p.add_argument("--policy", default="headroom")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--slo", action="store_true", help="send the workload's SLO headers")
    p.add_argument("--profiles", dest="profiles_path", help="scheduling profiles YAML")
    p.add_argument("--client-max-tokens", type=int, help="clients send this max_tokens (as "
                   "`lab compare --client-max-tokens`; default: each answer's length)")  # fmt: skip
    p.add_argument("--timeline", type=int, metavar="BINS", help="print the log binned by "
                   "decision order (JSON, then a table) instead of its lines")  # fmt: skip
    p.add_argument("--from", dest="first", type=int, default=0, help="first request index")
    p.add_argument("--to", dest="last", type=int, help="last request index (exclusive)")
    p.add_argument(
        "--oracle",
        action="store_true",
        help="each candidate's noise-blind "
        "oracle TTFT (ms) and each decision's regret_ms (10-20x slower)",
    )
    args = p.parse_args(argv)
    base = LabConfig(trace="-", pods=args.pods, streaming=True, seed=args.seed,
                     regret_samples=0, profiles_path=args.profiles_path,
                     client_max_tokens=args.client_max_tokens)  # fmt: skip
    try:
        cfg = cell_config(Path(args.dir), args.workload, args.load, base, slo=args.slo)
    except (OSError, ValueError) as e:
        print(f"headroom lab decisions: {e}", file=sys.stderr)
        return 2
    cfg = replace(cfg, policy=args.policy)
    log = decision_log(cfg, args.first, args.last, oracle=args.oracle)
    if args.timeline:
        bins = timeline(log, args.timeline)
        print(json.dumps(bins))
        print(table(bins))
        return 0
    for d in log:
        print(json.dumps(d))
    return 0
